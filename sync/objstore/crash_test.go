package objstore

const crashChildEnv = "RUNNEL_OBJSTORE_CRASH_CHILD"

func crashChild() {}

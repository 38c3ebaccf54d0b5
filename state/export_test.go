package state

// SetCompactCopying sets the hook compactIfFree calls as the copy starts.
func SetCompactCopying(f func()) { compactCopying = f }

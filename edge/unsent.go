package edge

import "sync"

// unsentAges remembers when outbox sequence numbers were committed, so that
// the fleet status can say how old the oldest entry the hub has not acked
// is: one mark per checkpoint that added entries (its first sequence and
// commit time). Marks wholly acked go; past maxUnsentMarks, the two
// neighbours closest in time merge, keeping the earlier time, so that a
// week offline (a checkpoint a second) costs 8 KiB and the age is never
// younger than the truth, and older by at most about 1/256 of the outage.
// After a restart the entries committed before it count from the start.
type unsentAges struct {
	mu    sync.Mutex
	marks []unsentMark // seq ascending
}

type unsentMark struct {
	seq uint64 // the first outbox sequence the checkpoint committed
	at  int64  // when it committed, Unix ms
}

const maxUnsentMarks = 512

// committed records that sequences from first on were committed at at.
func (u *unsentAges) committed(first uint64, at int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if n := len(u.marks); n > 0 && u.marks[n-1].seq >= first {
		return
	}
	if len(u.marks) == maxUnsentMarks {
		// Merge the two neighbours closest in time (the earlier time
		// stays), so that the marks stay spread evenly over the outage.
		best := 0
		for i := 1; i+1 < len(u.marks); i++ {
			if u.marks[i+1].at-u.marks[i].at < u.marks[best+1].at-u.marks[best].at {
				best = i
			}
		}
		u.marks = append(u.marks[:best+1], u.marks[best+2:]...)
	}
	u.marks = append(u.marks, unsentMark{first, at})
}

// oldest returns when the entry with sequence seq (the first not acked)
// was committed, or ok false when no mark covers it (it was committed
// before this start).
func (u *unsentAges) oldest(seq uint64) (at int64, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	// Marks whose entries are all below seq are acked: drop them.
	i := 0
	for i+1 < len(u.marks) && u.marks[i+1].seq <= seq {
		i++
	}
	u.marks = u.marks[i:]
	if len(u.marks) == 0 || u.marks[0].seq > seq {
		return 0, false
	}
	return u.marks[0].at, true
}

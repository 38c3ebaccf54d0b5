// Package pageout hands back to the kernel the pages of the process's own
// executable that start-up touched.
//
// A Go binary's start-up reads much of its text and read-only data once:
// every package's init (protobuf descriptors, flag and settings tables,
// templates), the configuration and recovery paths. The kernel maps those
// pages, and the ones around each fault (fault-around, 64 KB), into the
// process, where they count toward its resident set until memory
// pressure reclaims them: 18–26 MB of runnel-edge's and runnel-hub's,
// against the 2–5 MB the steady state runs. Executable asks the kernel to
// reclaim them now (madvise MADV_PAGEOUT, Linux 5.4 and later); what runs
// after faults its pages back in from the page cache, or from disk for a
// page the kernel evicted. Only the read-only mappings are advised: the
// written data pages are anonymous, and on a gateway with swap they would
// go there.
package pageout

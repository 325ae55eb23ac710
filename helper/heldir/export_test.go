package heldir

// UseOpenat makes openNoFollow use openat(O_NOFOLLOW) as on a kernel
// without openat2 (on), or try openat2 first again (off).
func UseOpenat(on bool) { noOpenat2.Store(on) }

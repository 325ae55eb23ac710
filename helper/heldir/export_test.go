package heldir

// UseOpenat makes openNoFollow use openat(O_NOFOLLOW) as on a kernel
// without openat2 (on), or try openat2 first again (off).
func UseOpenat(on bool) { noOpenat2.Store(on) }

// AfterMkdir sets the hook that runs between the making of a component
// and its opening (nil: none).
func AfterMkdir(f func(parent int, name string)) { afterMkdir = f }

// BeforeLook sets the hook that runs between an open that found no
// directory and the look at what was there (nil: none).
func BeforeLook(f func(parent int, name string)) { beforeLook = f }

// Package heldir opens a job's output dir once and holds it: the job dir as
// the user gave it, then every component below it (otel, links/<job id>,
// nodes/<node>) made with mkdirat and opened without following a symbolic
// link, each checked with fstat on the descriptor it was opened as. Every
// later file operation goes through the held descriptor (Dir.At), so that
// whoever can write the job dir cannot redirect the job's files, its
// collector's configuration or its logs by renaming a component away and
// putting a link or a directory of their own in its place.
package heldir

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Dir is an output dir held open.
type Dir struct {
	// Path is the output dir's path as it was opened: the name for
	// people (messages, the readiness report, state.json), never for a
	// file operation.
	Path string
	// Warnings are the dirs others can write, one sentence naming them
	// all; nil when there are none.
	Warnings []string
	f        *os.File
}

// File is the held directory (for exec.Cmd.ExtraFiles). It stays owned by
// Dir: Close closes it.
func (d *Dir) File() *os.File { return d.f }

// At is the base path of every file operation in the held dir:
// "/proc/self/fd/<n>". The kernel resolves that magic link to the held
// directory itself, wherever it has been renamed to since, and a path below
// it is looked up from there: open, os.CreateTemp, and rename(2) between
// two names under it (atomicfile's temporary file and rename: both names
// are in the same directory of the same mount) work as on the real path,
// and keep working in the dir after it was renamed and a link put in its
// place (TestRenameAfterOpenRedirectsNothing). It names the descriptor of
// this process: a child that inherits the dir at another number has its
// own base (ChildAt).
func (d *Dir) At() string { return "/proc/self/fd/" + strconv.Itoa(int(d.f.Fd())) }

// ChildAt is At for a child process that inherits the held dir as
// exec.Cmd.ExtraFiles[i] (there it is descriptor 3+i).
func ChildAt(i int) string { return "/proc/self/fd/" + strconv.Itoa(3+i) }

// Close closes the held dir.
func (d *Dir) Close() error { return d.f.Close() }

// Open makes and opens out, a dir below jobDir (both absolute), and holds
// it. The job dir is made (os.MkdirAll) and opened as given: links above it
// are the user's and the site's business. Every component from there down
// is made with mode (masked by the umask) when missing and opened without
// following a symbolic link (openat2 with RESOLVE_NO_SYMLINKS and
// RESOLVE_BENEATH where the kernel has it, else openat with O_NOFOLLOW and
// O_DIRECTORY), then checked on its descriptor: owned by this process's
// user or root (the job dir included) and a directory; out itself owned by
// this process's user and writable by no one else (its mode is then set to
// mode). Errors name the path, the owner found and why. The job dir, its
// parents and the components above out writable by others (and not sticky,
// as /tmp is) are Warnings, not errors: the ordinary setgid project dir.
func Open(jobDir, out string, mode os.FileMode) (*Dir, error) {
	jobDir, out = filepath.Clean(jobDir), filepath.Clean(out)
	if !filepath.IsAbs(jobDir) || !filepath.IsAbs(out) {
		return nil, fmt.Errorf("output dir %s (job dir %s): not an absolute path", out, jobDir)
	}
	rel, err := filepath.Rel(jobDir, out)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("output dir %s is not below the job dir %s", out, jobDir)
	}
	if err := os.MkdirAll(jobDir, mode); err != nil {
		return nil, fmt.Errorf("output dir %s: the job dir %s: %w", out, jobDir, unwrap(err))
	}
	fd, err := unix.Open(jobDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("output dir %s: the job dir %s: %w", out, jobDir, err)
	}
	d := &Dir{Path: out}
	uid := os.Getuid()
	var writable []string
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("output dir %s: the job dir %s: %w", out, jobDir, err)
	}
	if err := owned(out, jobDir, "the job dir", &st, uid); err != nil {
		unix.Close(fd)
		return nil, err
	}
	writable = append(writable, othersWrite(jobDir, st.Mode)...)
	writable = append(writable, parentsOthersWrite(jobDir)...)
	path := jobDir
	comps := strings.Split(rel, "/")
	for i, name := range comps {
		last := i == len(comps)-1
		path = filepath.Join(path, name)
		next, err := step(fd, name, path, out, mode)
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
		fd = next
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("output dir %s: %s: %w", out, path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return nil, fmt.Errorf("output dir %s: %s is not a directory", out, path)
		}
		if !last {
			if err := owned(out, path, "", &st, uid); err != nil {
				unix.Close(fd)
				return nil, err
			}
			writable = append(writable, othersWrite(path, st.Mode)...)
			continue
		}
		if int(st.Uid) != uid {
			unix.Close(fd)
			return nil, fmt.Errorf("output dir %s is owned by %s, not by the job's user (uid %d): refusing to write the job's telemetry into a directory another user controls", out, who(st.Uid), uid)
		}
		if st.Mode&0o022 != 0 {
			unix.Close(fd)
			return nil, fmt.Errorf("output dir %s is group- or other-writable (mode %04o): refusing to write the job's telemetry where another user can rename or plant files; make it 0700 (chmod go-w %s) or remove it", out, st.Mode&0o7777, out)
		}
		if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("output dir %s: setting its mode %04o: %w", out, mode.Perm(), err)
		}
	}
	d.f = os.NewFile(uintptr(fd), out)
	if len(writable) > 0 {
		d.Warnings = []string{fmt.Sprintf("writable by other users: %s; the output dir %s is held open and never followed through a link, but another user there can rename the job's dirs (the ordinary layout of a setgid project dir)", strings.Join(writable, ", "), out)}
	}
	// The base path is the /proc magic link: make sure it leads here.
	var via unix.Stat_t
	if err := unix.Stat(d.At(), &via); err != nil || via.Dev != st.Dev || via.Ino != st.Ino {
		d.f.Close()
		if err == nil {
			err = errors.New("it leads elsewhere")
		}
		return nil, fmt.Errorf("output dir %s: the held dir through %s: %v (is /proc mounted?)", out, d.At(), err)
	}
	return d, nil
}

// step makes name in the dir parent (the dir at path's parent) and opens it
// without following a link.
func step(parent int, name, path, out string, mode os.FileMode) (int, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return -1, fmt.Errorf("output dir %s: component %q is not a name", out, name)
	}
	if err := unix.Mkdirat(parent, name, uint32(mode.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("output dir %s: making %s: %w", out, path, err)
	}
	if afterMkdir != nil {
		afterMkdir(parent, name)
	}
	fd, err := openNoFollow(parent, name)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ENOENT) {
		// It was there a moment ago (made here, or found made): someone
		// who can write the parent renamed or removed it.
		return -1, fmt.Errorf("output dir %s: %s was moved or removed between its making and its opening: refusing to go on: whoever can write its parent could have done it", out, path)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
		if beforeLook != nil {
			beforeLook(parent, name)
		}
		var st unix.Stat_t
		serr := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if serr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, 4096)
			n, _ := unix.Readlinkat(parent, name, buf)
			return -1, fmt.Errorf("output dir %s: %s is a symbolic link (to %q, owned by %s): refusing to follow it: whoever can write its parent could have put it there", out, path, buf[:max(n, 0)], who(st.Uid))
		}
		if errors.Is(serr, unix.ENOENT) {
			// A link (or a file) at the open, gone a moment later.
			return -1, fmt.Errorf("output dir %s: %s was replaced while it was being opened (not a directory at the open, gone a moment later): refusing to go on: whoever can write its parent could have done it", out, path)
		}
		return -1, fmt.Errorf("output dir %s: %s is not a directory", out, path)
	}
	return -1, fmt.Errorf("output dir %s: opening %s: %w", out, path, err)
}

// afterMkdir, when set (by tests only), runs between the making of a
// component and its opening: the moment another user who writes the parent
// can rename it away.
var afterMkdir func(parent int, name string)

// beforeLook, when set (by tests only), runs between an open that found no
// directory and the look at what was there instead.
var beforeLook func(parent int, name string)

// noOpenat2 is set once openat2 was found missing or refused.
var noOpenat2 atomic.Bool

// openNoFollow opens the directory name in parent, following no symbolic
// link: openat2(RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH) on Linux 5.6 and
// later, else openat(O_NOFOLLOW|O_DIRECTORY) (name is one component, so
// the two refuse the same links).
func openNoFollow(parent int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(parent, name, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH})
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return fd, err
		}
		// No openat2 (before Linux 5.6), or a seccomp filter that
		// refuses it: openat from here on.
		noOpenat2.Store(true)
	}
	return unix.Openat(parent, name, flags, 0)
}

// owned refuses a dir (st) owned by neither uid nor root.
func owned(out, path, what string, st *unix.Stat_t, uid int) error {
	if int(st.Uid) == uid || st.Uid == 0 {
		return nil
	}
	if what != "" {
		path = what + " " + path
	}
	return fmt.Errorf("output dir %s: %s is owned by %s, neither the job's user (uid %d) nor root: refusing to write the job's telemetry below a directory another user controls", out, path, who(st.Uid), uid)
}

// othersWrite names path when mode lets others than its owner write it
// (group or other) and is not sticky.
func othersWrite(path string, mode uint32) []string {
	if mode&0o022 != 0 && mode&unix.S_ISVTX == 0 {
		return []string{fmt.Sprintf("%s (mode %04o)", path, mode&0o7777)}
	}
	return nil
}

// parentsOthersWrite names the parents of dir that others can write (and
// are not sticky).
func parentsOthersWrite(dir string) []string {
	var out []string
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			out = append(out, othersWrite(p, st.Mode)...)
		}
		if p == "/" {
			break
		}
	}
	return out
}

// who is "name (uid n)", or "uid n" when the name is unknown.
func who(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

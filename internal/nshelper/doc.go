// Package nshelper is the isolation helper (handler/ISOLATION.md): the
// mode of the daemon's own binary that starts a process handler in a new
// user and network namespace for a daemon that is not root. The daemon is
// non-dumpable (server.Harden), a state its forked child keeps until
// execve, so /proc/<child>/uid_map belongs to root and the daemon cannot
// write it; nor can a Go process unshare a user namespace for itself (the
// kernel refuses CLONE_NEWUSER to a multithreaded process). So the daemon
// starts /proc/self/exe with Arg: that process is dumpable after its
// execve, starts the handler in the namespaces, writes its maps, and
// relays its exit status.
//
// The helper runs with the binding's environment only (it has nothing
// else to hide: the handler is as dumpable and holds the same variables),
// stays in the handler's process group so the group kill reaches both,
// and hands the handler its own stdin, stdout and stderr. It says whether
// the handler started on fd StatusFD: one zero byte once the handler's
// execve succeeded, else the error's text.
//
// It is a package of its own, importing only the standard library, so its
// init runs before the daemon's heavier packages are initialized: a
// helper does not pay for them on each call.
package nshelper

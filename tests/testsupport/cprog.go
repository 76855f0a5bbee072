package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// doubleForkC daemonizes the classic way: fork, the first process exits at
// once; setsid; wait argv[1] microseconds; fork, the middle process exits at
// once. The daemon appends its pid to the file argv[2] and sleeps.
const doubleForkC = `
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
	useconds_t us = (useconds_t)atoi(argv[1]);
	if (fork() != 0) _exit(0);
	setsid();
	usleep(us);
	if (fork() != 0) _exit(0);
	FILE *f = fopen(argv[2], "a");
	fprintf(f, "%d\n", getpid());
	fclose(f);
	for (;;) pause();
}
`

// forkRelayC runs argv[1] relays: each forks, leaves the rest to its child
// and exits, over and over, the child moving to a session of its own and
// waiting argv[2] microseconds before it forks on. No process lives long,
// and none stays in the job's process group. Every 16th hop appends a byte
// to the file argv[4]: while it grows, the storm lives. After argv[3]
// seconds the relays stop on their own, so a test that fails leaves no
// storm behind.
const forkRelayC = `
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
	int n = atoi(argv[1]);
	useconds_t us = (useconds_t)atoi(argv[2]);
	time_t end = time(0) + atoi(argv[3]);
	int beat = open(argv[4], O_WRONLY | O_APPEND | O_CREAT, 0644);
	unsigned hops = 0;
	for (int i = 1; i < n; i++)
		if (fork() == 0) break;
	for (;;) {
		if (time(0) > end) _exit(0);
		if (++hops % 16 == 0) write(beat, "x", 1);
		pid_t p = fork();
		if (p > 0) _exit(0);
		if (p < 0) { usleep(1000); continue; }
		setsid();
		if (us) usleep(us);
	}
}
`

var cprogs struct {
	mu    sync.Mutex
	built map[string]cprog
}

type cprog struct {
	path string
	err  error
}

// buildC compiles src, once per test binary and name, and returns the
// program's path. Its error wraps ErrNoCC when there is no C compiler.
func buildC(name, src string, flags ...string) (string, error) {
	cprogs.mu.Lock()
	defer cprogs.mu.Unlock()
	if p, ok := cprogs.built[name]; ok {
		return p.path, p.err
	}
	path, err := compileC(name, src, flags)
	if cprogs.built == nil {
		cprogs.built = map[string]cprog{}
	}
	cprogs.built[name] = cprog{path, err}
	return path, err
}

func compileC(name, src string, flags []string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", ErrNoCC
	}
	dir, err := os.MkdirTemp("", "leaderrun-"+name+"-")
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, name+".c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	args := append(append([]string{}, flags...), "-o", bin, file)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// DoubleFork builds a program that daemonizes by double fork: run as
// "PROG MICROSECONDS PIDFILE", its first process forks and exits at once,
// the middle one calls setsid, waits MICROSECONDS, forks and exits, and the
// daemon appends its pid to PIDFILE and sleeps for ever.
func DoubleFork() (string, error) { return buildC("doublefork", doubleForkC) }

// ForkRelay builds a fork storm: run as "PROG N MICROSECONDS SECONDS
// BEATFILE", it keeps N relays going, each a process that forks and exits
// at once while its child calls setsid, waits MICROSECONDS and does the
// same, until SECONDS have passed; BEATFILE grows while any relay lives.
func ForkRelay() (string, error) { return buildC("forkrelay", forkRelayC) }

// respawnC keeps argv[2] processes running "sleep argv[1]" with an
// environment of exactly argv[3] (one VAR=value), their output sent to
// /dev/null, and starts another at once whenever one dies, until argv[1]
// seconds have passed. It needs no privilege.
const respawnC = `
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
	time_t end = time(0) + atoi(argv[1]);
	int n = atoi(argv[2]), alive = 0;
	char *env[] = {argv[3], 0};
	char *args[] = {"sleep", argv[1], 0};
	while (time(0) <= end) {
		while (alive < n) {
			pid_t p = fork();
			if (p == 0) {
				int fd = open("/dev/null", O_RDWR);
				dup2(fd, 0); dup2(fd, 1); dup2(fd, 2);
				execve("/bin/sleep", args, env);
				_exit(127);
			}
			if (p > 0) alive++;
			else usleep(1000);
		}
		if (wait(0) > 0) alive--;
	}
	return 0;
}
`

// Respawn builds a program any user may run: "PROG SECONDS N VAR=VALUE"
// keeps N sleeps with the environment VAR=VALUE alone running for SECONDS,
// starting another as soon as one is killed.
func Respawn() (string, error) { return buildOpenC("respawn", respawnC) }

// zombieChurnC runs argv[3] processes side by side, each of which forks,
// every argv[1] microseconds, a child that exits at once, and reaps it
// eight forks later: a few zombies are always listed in /proc, never the
// same ones for long, and nothing of it lives more than a moment. It needs
// no privilege and knows nothing of leaderrun. After argv[2] seconds it
// stops on its own. With a fourth argument "group" each child first makes
// a process group of its own, as a supervisor's jobs do.
const zombieChurnC = `
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
	useconds_t us = (useconds_t)atoi(argv[1]);
	time_t end = time(0) + atoi(argv[2]);
	int group = argc > 4 && strcmp(argv[4], "group") == 0;
	for (int n = atoi(argv[3]); n > 1; n--)
		if (fork() == 0) break;
	pid_t ring[8] = {0};
	for (int i = 0; time(0) <= end; i = (i + 1) % 8) {
		pid_t p = fork();
		if (p == 0) {
			if (group) setpgid(0, 0);
			_exit(0);
		}
		if (ring[i] > 0) waitpid(ring[i], 0, 0);
		ring[i] = p;
		usleep(us);
	}
	return 0;
}
`

// ZombieChurn builds a program any user may run: "PROG MICROSECONDS
// SECONDS N [group]" keeps N processes forking a child that exits at once
// every MICROSECONDS and reaping it eight forks later, for SECONDS; with
// "group" each child makes a process group of its own first.
func ZombieChurn() (string, error) { return buildOpenC("zombiechurn", zombieChurnC) }

// buildOpenC is buildC for a program another user runs: its directory,
// made private, is opened to all.
func buildOpenC(name, src string) (string, error) {
	p, err := buildC(name, src)
	if err == nil {
		err = os.Chmod(filepath.Dir(p), 0o755)
	}
	return p, err
}

// execChurnC is zombieChurnC with children that run a program instead of
// exiting at once: every argv[1] microseconds, for argv[2] seconds, each
// of argv[3] processes forks a child that runs argv[4] with the arguments
// after it, output to /dev/null, and reaps it eight forks later. Given a
// set-user-ID program that exits at once ("mount --version"), it keeps
// zombies whose effective uid is that program's owner's listed in /proc.
const execChurnC = `
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
	useconds_t us = (useconds_t)atoi(argv[1]);
	time_t end = time(0) + atoi(argv[2]);
	for (int n = atoi(argv[3]); n > 1; n--)
		if (fork() == 0) break;
	pid_t ring[8] = {0};
	for (int i = 0; time(0) <= end; i = (i + 1) % 8) {
		pid_t p = fork();
		if (p == 0) {
			int fd = open("/dev/null", O_RDWR);
			dup2(fd, 0); dup2(fd, 1); dup2(fd, 2);
			execv(argv[4], argv + 4);
			_exit(127);
		}
		if (ring[i] > 0) waitpid(ring[i], 0, 0);
		ring[i] = p;
		usleep(us);
	}
	return 0;
}
`

// ExecChurn builds a program any user may run: "PROG MICROSECONDS SECONDS
// N PATH ARGS..." keeps N processes starting PATH ARGS every MICROSECONDS
// and reaping each eight starts later, for SECONDS.
func ExecChurn() (string, error) { return buildOpenC("execchurn", execChurnC) }

// stampStartC is the stamp child with nothing before its first
// instruction but the kernel's exec: no libc, no dynamic loader, no
// constructors. _start passes the initial stack (argc, argv) to
// stamp_main, whose first act is clock_gettime(CLOCK_REALTIME) as a raw
// system call; it then writes the nanoseconds since the epoch and a
// newline, in one write, to the file argv[1] (created or truncated) and
// pauses until it is killed. x86-64 only; elsewhere it does not build.
const stampStartC = `
#if !defined(__x86_64__)
#error "x86-64 only"
#endif
static long sys3(long n, long a, long b, long c) {
	long r;
	__asm__ volatile ("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}
struct stamp_ts { long sec, nsec; };
__attribute__((used)) void stamp_main(long *sp) {
	struct stamp_ts now;
	sys3(228 /* clock_gettime */, 0 /* CLOCK_REALTIME */, (long)&now, 0);
	char **argv = (char **)(sp + 1);
	char buf[24];
	int i = sizeof buf;
	unsigned long ns = (unsigned long)now.sec * 1000000000UL + (unsigned long)now.nsec;
	buf[--i] = '\n';
	do { buf[--i] = '0' + ns % 10; ns /= 10; } while (ns);
	long fd = sp[0] > 1 ? sys3(2 /* open */, (long)argv[1], 01 | 0100 | 01000 /* O_WRONLY|O_CREAT|O_TRUNC */, 0644) : -1;
	if (fd < 0) sys3(60 /* exit */, 127, 0, 0);
	sys3(1 /* write */, fd, (long)(buf + i), sizeof buf - i);
	sys3(3 /* close */, fd, 0, 0);
	for (;;) sys3(34 /* pause */, 0, 0, 0);
}
__asm__(".text\n.globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall stamp_main\n\thlt\n");
`

// stampMainC is the stamp child where _start cannot be written: the same
// steps from main's first statement, after libc's start-up.
const stampMainC = `
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char buf[32];
	int n = snprintf(buf, sizeof buf, "%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
	int fd = argc > 1 ? open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
	if (fd < 0) return 127;
	write(fd, buf, n);
	close(fd);
	for (;;) pause();
}
`

// StampChild builds the stamp child: "PROG FILE" reads CLOCK_REALTIME
// first of all, writes the nanoseconds since the epoch and a newline to
// FILE in one write, and waits until it is killed. how says which build it
// got, best first: a static program without libc that reads the clock as
// a raw system call from _start; a static one that reads it in main's
// first statement; a dynamically linked one that does.
func StampChild() (path, how string, err error) {
	if path, err = buildC("stamp-start", stampStartC, "-O2", "-static", "-nostdlib", "-fno-stack-protector"); err == nil {
		return path, "static, no libc: a raw clock_gettime(CLOCK_REALTIME) system call from _start", nil
	}
	if path, err = buildC("stamp-main-static", stampMainC, "-O2", "-static"); err == nil {
		return path, "static: clock_gettime(CLOCK_REALTIME) in main's first statement", nil
	}
	if path, err = buildC("stamp-main", stampMainC, "-O2"); err == nil {
		return path, "dynamically linked: clock_gettime(CLOCK_REALTIME) in main's first statement", nil
	}
	return "", "", err
}

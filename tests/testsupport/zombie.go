package testsupport

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// zombieMainC exits its main thread while another thread keeps working:
// /proc/PID/stat then says "Z" although the process runs on. Its one
// argument is a file it appends its pid to.
const zombieMainC = `
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *work(void *arg) {
	FILE *f = fopen((const char *)arg, "a");
	fprintf(f, "%d\n", getpid());
	fclose(f);
	for (;;) sleep(1);
	return 0;
}
int main(int argc, char **argv) {
	pthread_t t;
	pthread_create(&t, 0, work, argv[1]);
	pthread_exit(0);
}
`

var zombieMain struct {
	once sync.Once
	path string
	err  error
}

// ErrNoCC is wrapped by ZombieMain's error when there is no C compiler
// (cc, from scripts/install-deps.sh).
var ErrNoCC = errors.New("no C compiler (cc): install gcc (scripts/install-deps.sh)")

// ZombieMain builds, once per test binary, a program whose main thread
// exits while another thread runs on and appends the process's pid to the
// file named by its argument: a process that looks dead to a careless
// reader of /proc. It returns the program's path.
func ZombieMain() (string, error) {
	z := &zombieMain
	z.once.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			z.err = ErrNoCC
			return
		}
		dir, err := os.MkdirTemp("", "leaderrun-zmain-")
		if err != nil {
			z.err = err
			return
		}
		src := filepath.Join(dir, "zmain.c")
		if z.err = os.WriteFile(src, []byte(zombieMainC), 0o644); z.err != nil {
			return
		}
		bin := filepath.Join(dir, "zmain")
		if out, err := exec.Command(cc, "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
			z.err = fmt.Errorf("cc: %v\n%s", err, out)
			return
		}
		z.path = bin
	})
	return z.path, z.err
}

// Package testsupport is the scaffolding leaderrun's test packages share:
// a buffer a process and a test can share, polling with a deadline, a
// process's exit status as a shell reports it, a systemd notification
// socket, and throwaway TLS certificates. It holds no product logic and is
// imported only by tests.
package testsupport

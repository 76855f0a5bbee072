// Package testsupport is the scaffolding leaderrun's test packages share:
// a buffer a process and a test can share, polling with a deadline, a
// process's exit status as a shell reports it, the list of processes in
// /proc, files written or the test failed, a systemd notification socket,
// throwaway TLS certificates, loopback listeners, accept loops and servers
// that never answer, a reverse proxy that fails requests on demand, HTTP
// and metric reading, a pseudo-terminal to type at, a program whose main
// thread exits while it runs on, and a read-only mount. It holds no
// product logic and is imported only by tests.
package testsupport

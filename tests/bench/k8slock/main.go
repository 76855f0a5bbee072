// Command k8slock is the benchmark's rival Kubernetes contender: a wrapper
// built on client-go's leaderelection with a LeaseLock, the way operators
// commonly guard a singleton today. It starts the wrapped command when it
// starts leading and exits the process when it stops leading. It does not
// kill the command's process tree and exports no fencing token; the
// benchmark records what that costs.
//
//	k8slock -kubeconfig FILE -namespace NS -lease NAME -identity ID \
//	    [-lease-duration 15s -renew-deadline 10s -retry-period 2s] -- CMD ARGS...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "default", "namespace of the Lease")
	lease := flag.String("lease", "", "name of the Lease")
	identity := flag.String("identity", "", "holder identity (default: hostname-pid)")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "lease duration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "renew deadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "retry period")
	flag.Parse()
	args := flag.Args()
	if *lease == "" || len(args) == 0 {
		fmt.Fprintln(os.Stderr, "k8slock: -lease and a command after -- are required")
		os.Exit(125)
	}
	if *identity == "" {
		h, _ := os.Hostname()
		*identity = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8slock:", err)
		os.Exit(125)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8slock:", err)
		os.Exit(125)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *lease},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}

	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; cancel() }()

	exited := make(chan int, 1)
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
				if err := cmd.Start(); err != nil {
					fmt.Fprintln(os.Stderr, "k8slock:", err)
					exited <- 127
					cancel()
					return
				}
				go func() {
					_ = cmd.Wait()
					exited <- cmd.ProcessState.ExitCode()
					cancel()
				}()
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				// As operators commonly do: leave the process and nothing
				// more. The command, if still running, is left to its fate.
				code := 1
				select {
				case c := <-exited:
					code = c
				default:
				}
				os.Exit(code)
			},
		},
	})
	os.Exit(1)
}

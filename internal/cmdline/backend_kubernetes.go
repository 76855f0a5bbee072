//go:build linux

package cmdline

import (
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/kubernetes"
	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
)

const catKubernetes = "Kubernetes"

var kubernetesBackend = &backend{
	Name:     "kubernetes",
	Title:    "a Kubernetes Lease",
	Category: catKubernetes,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", Category: catKubernetes, EnvVars: []string{"KUBECONFIG"}, DefaultText: "~/.kube/config, else the pod's service account",
				Usage: "kubeconfig `FILE` (several joined with : as in kubectl)"},
			&cli.StringFlag{Name: "k8s-context", Category: catKubernetes, EnvVars: []string{"LEADERRUN_K8S_CONTEXT"}, DefaultText: "the current one",
				Usage: "kubeconfig context"},
			&cli.StringFlag{Name: "k8s-namespace", Category: catKubernetes, EnvVars: []string{"LEADERRUN_K8S_NAMESPACE"}, DefaultText: "the context's, else the pod's own, else default",
				Usage: "namespace of the Lease"},
		}
	},
	Fields: map[string]string{"Namespace": "--k8s-namespace", "Kubeconfig": "--kubeconfig", "Context": "--k8s-context"},
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		return &kubernetesSettings{kubewire.Hello{
			Namespace:  c.String("k8s-namespace"),
			Kubeconfig: c.String("kubeconfig"),
			Context:    c.String("k8s-context"),
		}}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &kubernetesSettings{}
		if err := unmarshalSettings(raw, &s.Hello); err != nil {
			return nil, err
		}
		s.Conn = nil // leaderrun itself reads the kubeconfig again
		return s, nil
	},
}

// kubernetesSettings are the Kubernetes options.
type kubernetesSettings struct{ kubewire.Hello }

func (s *kubernetesSettings) New(opts locker.Options, _ bool, log hclog.Logger) (locker.Locker, error) {
	l, err := kubernetes.New(kubernetes.Config{
		Options:    opts,
		Namespace:  s.Namespace,
		Kubeconfig: s.Kubeconfig,
		Context:    s.Context,
		Logger:     log.Named("kubernetes"),
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (s *kubernetesSettings) ChildEnv() []envVar {
	v := set(nil, "LEADERRUN_K8S_NAMESPACE", s.Namespace)
	v = setOption(v, "kubeconfig", "KUBECONFIG", s.Kubeconfig)
	return set(v, "LEADERRUN_K8S_CONTEXT", s.Context)
}

func (s *kubernetesSettings) Target(lk locker.Locker) (string, time.Duration) {
	return targetOf(lk)
}

// Guard adds how lk reaches its API server, as kubeconfig or the service
// account resolved it: the small guard cannot read a kubeconfig. It is left
// out, and the guard is then leaderrun itself, when a plain HTTPS client
// cannot act as that user (an exec plugin, an auth provider). The
// credentials travel only in the guard's hello, over its pipe.
func (s *kubernetesSettings) Guard(lk locker.Locker) (any, string) {
	h := s.Hello
	kl, ok := locker.As[*kubernetes.Locker](lk)
	if !ok {
		return h, "no Kubernetes connection"
	}
	conn, err := kl.Connection()
	if err != nil {
		return h, err.Error()
	}
	h.Conn = &conn
	return h, ""
}

func (s *kubernetesSettings) Scope() string { return "" }

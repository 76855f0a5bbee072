package kubernetes

import (
	"context"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// leaseClient reads and writes the Leases of one namespace through
// client-go's REST client. It does the work of client-go's generated
// coordination/v1 client, whose package registers every Kubernetes API type
// at start-up (k8s.io/client-go/kubernetes/scheme): measured on this
// binary, that alone would add about 20 MB to it, and its init would cost
// every backend's process memory. The scheme here knows the Lease and the
// meta types only.
type leaseClient struct {
	rc *rest.RESTClient
	ns string
}

var (
	schemeOnce sync.Once
	codecs     serializer.CodecFactory
)

// leaseCodecs is the codec factory of a scheme holding coordination/v1 and
// the meta types (Status, WatchEvent, options), built on first use.
func leaseCodecs() serializer.CodecFactory {
	schemeOnce.Do(func() {
		scheme := runtime.NewScheme()
		if err := coordinationv1.AddToScheme(scheme); err != nil {
			panic(err) // static registrations cannot fail
		}
		metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
		codecs = serializer.NewCodecFactory(scheme)
	})
	return codecs
}

// newLeaseClient builds the client for namespace ns from cfg.
func newLeaseClient(cfg *rest.Config, ns string) (*leaseClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &coordinationv1.SchemeGroupVersion
	c.APIPath = "/apis"
	// Protobuf both ways: a Lease decodes through its generated Unmarshal
	// code where JSON walks it by reflection, touching type data and code
	// that a settled process would otherwise keep mapped after every
	// renewal (docs/results/bench-2026-12-01-footprint.md).
	// JSON stays accepted for a server or proxy that does not speak it.
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.NegotiatedSerializer = leaseCodecs().WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &leaseClient{rc: rc, ns: ns}, nil
}

// Get reads the Lease name.
func (c *leaseClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.rc.Get().Namespace(c.ns).Resource("leases").Name(name).Do(ctx).Into(out)
	return out, err
}

// Create writes a new Lease; it fails with AlreadyExists if there is one.
func (c *leaseClient) Create(ctx context.Context, ls *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.rc.Post().Namespace(c.ns).Resource("leases").Body(ls).Do(ctx).Into(out)
	return out, err
}

// Update replaces the Lease; with ls.ResourceVersion set it fails with
// Conflict unless that is still the Lease's resourceVersion.
func (c *leaseClient) Update(ctx context.Context, ls *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.rc.Put().Namespace(c.ns).Resource("leases").Name(ls.Name).Body(ls).Do(ctx).Into(out)
	return out, err
}

// Delete removes the Lease name.
func (c *leaseClient) Delete(ctx context.Context, name string, _ metav1.DeleteOptions) error {
	return c.rc.Delete().Namespace(c.ns).Resource("leases").Name(name).Do(ctx).Error()
}

// Watch streams changes of the Leases opts selects, until ctx ends or the
// server closes the stream.
func (c *leaseClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	req := c.rc.Get().Namespace(c.ns).Resource("leases").VersionedParams(&opts, metav1.ParameterCodec)
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return req.Watch(ctx)
}

// List reads the Leases opts selects.
func (c *leaseClient) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	out := &coordinationv1.LeaseList{}
	err := c.rc.Get().Namespace(c.ns).Resource("leases").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// DeleteIf removes the Lease name if its resourceVersion is still rv; it
// fails with Conflict otherwise.
func (c *leaseClient) DeleteIf(ctx context.Context, name, rv string) error {
	// Raw: the scheme registers DeleteOptions under v1, not under the
	// Lease's group.
	body := `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":` + strconv.Quote(rv) + `}}`
	return c.rc.Delete().Namespace(c.ns).Resource("leases").Name(name).
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body([]byte(body)).Do(ctx).Error()
}

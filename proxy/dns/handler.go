package dns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/sirupsen/logrus"
)

// Handler answers DNS queries: authoritatively for the cluster domain from Caches, everything
// else by forwarding to the upstreams. It is the mdns.Handler that Run serves.
type Handler struct {
	zone     string // cluster domain, lower-case FQDN ("cluster.local.")
	listenIP []byte // address of ns.dns.<zone>
	caches   Caches
	fwd      forwarder
	serial   uint32
	log      *logrus.Entry
}

// NewHandler returns a Handler over c. cfg.Domain defaults to cluster.local; cfg.Upstreams is
// used as given (no resolv.conf default here): without upstreams, outside names get SERVFAIL.
func NewHandler(cfg Config, c Caches) *Handler {
	domain := cfg.Domain
	if domain == "" {
		domain = DefaultDomain
	}
	log := cfg.Log
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Handler{
		zone:     mdns.Fqdn(strings.ToLower(strings.Trim(domain, "."))),
		listenIP: cfg.ListenIP,
		caches:   c,
		fwd:      forwarder{upstreams: cfg.Upstreams, timeout: forwardTimeout},
		serial:   uint32(time.Now().Unix()),
		log:      log,
	}
}

// ServeDNS answers one query and writes the reply, truncated to what the client can receive.
func (h *Handler) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	network := "udp"
	if w.RemoteAddr() != nil && strings.HasPrefix(w.RemoteAddr().Network(), "tcp") {
		network = "tcp"
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryBudget)
	defer cancel()
	m := h.resolve(ctx, req, network)
	if network == "udp" {
		size := mdns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(int(opt.UDPSize()), mdns.MinMsgSize)
		}
		m.Truncate(size)
	}
	if err := w.WriteMsg(m); err != nil {
		h.log.WithError(err).WithField("client", w.RemoteAddr()).Debug("write DNS reply")
	}
}

const (
	// forwardTimeout bounds one upstream attempt; stub resolvers retry after 5s, so two
	// upstreams can be tried before the client gives up on us.
	forwardTimeout = 2 * time.Second
	// queryBudget bounds all the work for one query, upstream retries included.
	queryBudget = 4 * time.Second
	// maxChase bounds CNAME chains inside the cluster zone (ExternalName pointing at a Service).
	maxChase = 8
	// ourUDPSize is the EDNS0 buffer size we advertise (the DNS flag day 2020 value).
	ourUDPSize = 1232
)

// resolve builds the reply to req received over network ("udp" or "tcp").
func (h *Handler) resolve(ctx context.Context, req *mdns.Msg, network string) *mdns.Msg {
	m := new(mdns.Msg)
	if req.Opcode != mdns.OpcodeQuery {
		return m.SetRcode(req, mdns.RcodeNotImplemented)
	}
	if len(req.Question) != 1 {
		return m.SetRcode(req, mdns.RcodeFormatError)
	}
	m.SetReply(req)
	m.RecursionAvailable = true
	q := req.Question[0]
	lname := strings.ToLower(q.Name)
	switch {
	case mdns.IsSubDomain(h.zone, lname):
		m.Authoritative = true
		if q.Qclass != mdns.ClassINET && q.Qclass != mdns.ClassANY {
			return m.SetRcode(req, mdns.RcodeRefused)
		}
		h.answerZone(ctx, m, q.Name, q.Qtype, network, 0)
	case q.Qtype == mdns.TypePTR:
		ip, ok := parseReverse(lname)
		var targets []string
		if ok {
			targets = h.ptrTargets(ip)
		}
		if len(targets) == 0 {
			// Not a cluster address: the host's resolvers own the reverse zones (CoreDNS's
			// "fallthrough in-addr.arpa ip6.arpa").
			return h.forward(ctx, req, network)
		}
		m.Authoritative = true
		for _, t := range targets {
			m.Answer = append(m.Answer, &mdns.PTR{Hdr: hdr(q.Name, mdns.TypePTR), Ptr: t})
		}
	default:
		return h.forward(ctx, req, network)
	}
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ourUDPSize, opt.Do())
	}
	return m
}

// answerZone appends the answer for (name, qtype) in the cluster zone to m, following CNAMEs.
func (h *Handler) answerZone(ctx context.Context, m *mdns.Msg, name string, qtype uint16, network string, depth int) {
	set := h.recordsAt(name, qtype)
	if !set.exists {
		m.Rcode = mdns.RcodeNameError
		m.Ns = []mdns.RR{h.soa()}
		return
	}
	if set.cname != nil && qtype != mdns.TypeCNAME && qtype != mdns.TypeANY {
		m.Answer = append(m.Answer, set.cname)
		target := set.cname.Target
		if mdns.IsSubDomain(h.zone, strings.ToLower(target)) {
			if depth < maxChase {
				h.answerZone(ctx, m, target, qtype, network, depth+1)
			}
			return
		}
		// Resolve the external target as a recursive resolver would: stub resolvers (glibc,
		// musl) do not chase a CNAME themselves.
		up := new(mdns.Msg)
		up.SetQuestion(target, qtype)
		up.SetEdns0(ourUDPSize, false)
		r, err := h.fwd.exchange(ctx, up, "udp")
		if err != nil {
			h.log.WithError(err).WithField("name", target).Debug("resolve ExternalName target")
			return
		}
		m.Answer = append(m.Answer, r.Answer...)
		if r.Rcode == mdns.RcodeNameError {
			m.Rcode = mdns.RcodeNameError
			m.Ns = r.Ns
		}
		return
	}
	before := len(m.Answer)
	for _, rr := range set.rrs {
		if qtype == mdns.TypeANY || rr.Header().Rrtype == qtype {
			m.Answer = append(m.Answer, rr)
		}
	}
	if len(m.Answer) == before {
		m.Ns = []mdns.RR{h.soa()} // NODATA: the name exists without records of this type
		return
	}
	if qtype == mdns.TypeSRV || qtype == mdns.TypeANY {
		m.Extra = append(m.Extra, set.extra...)
	}
}

// forward relays req to the upstreams and returns their reply, or SERVFAIL.
func (h *Handler) forward(ctx context.Context, req *mdns.Msg, network string) *mdns.Msg {
	r, err := h.fwd.exchange(ctx, req, network)
	if err != nil {
		h.log.WithError(err).WithField("name", req.Question[0].Name).Debug("forward DNS query")
		m := new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeServerFailure)
		m.RecursionAvailable = true
		return m
	}
	r.Id = req.Id
	return r
}

// forwarder sends queries to upstream resolvers in order until one answers.
type forwarder struct {
	upstreams []string // "ip:port"
	timeout   time.Duration
}

var errNoUpstreams = errors.New("no upstream resolvers configured (Config.Upstreams, or nameserver lines in /etc/resolv.conf)")

// exchange returns the first usable reply: a SERVFAIL or REFUSED from one upstream moves on to
// the next, and a truncated UDP reply is retried over TCP.
func (f *forwarder) exchange(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error) {
	if len(f.upstreams) == 0 {
		return nil, errNoUpstreams
	}
	var errs []error
	var last *mdns.Msg
	for _, up := range f.upstreams {
		if ctx.Err() != nil {
			break
		}
		r, err := f.try(ctx, req, up, network)
		if err == nil && r.Truncated && network == "udp" {
			r, err = f.try(ctx, req, up, "tcp")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("upstream %s: %w", up, err))
			continue
		}
		if r.Rcode == mdns.RcodeServerFailure || r.Rcode == mdns.RcodeRefused {
			last = r
			errs = append(errs, fmt.Errorf("upstream %s: %s", up, mdns.RcodeToString[r.Rcode]))
			continue
		}
		return r, nil
	}
	if last != nil {
		return last, nil
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (f *forwarder) try(ctx context.Context, req *mdns.Msg, upstream, network string) (*mdns.Msg, error) {
	c := &mdns.Client{Net: network, Timeout: f.timeout}
	r, _, err := c.ExchangeContext(ctx, req, upstream)
	return r, err
}

package etcd

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// Token is a site's join token: "FLO1:<ca pin>:<secret>". The pin lets a joining host check
// that it talks to the right site before it sends the secret (k3s-style).
type Token struct {
	CAPin  string
	Secret string
	// SkipCAPin lets a host join with a token without a pin, trusting whatever CA the
	// site presents (--insecure-skip-ca-pin).
	SkipCAPin bool
	// GossipKey is the site's gossip key, carried by a rotated token ("FLO2:<ca pin>:<gossip
	// key>:<secret>"): the key stays the one derived from the site's first token, so hosts
	// joined before and after a rotation gossip together. Nil for a first token, whose
	// secret the key derives from.
	GossipKey []byte
}

// MinTokenBits is the least entropy a join token's secret may have: it admits hosts to the
// site and keys gossip encryption.
const MinTokenBits = 128

// ParseToken reads a token; a bare secret (no pin) is accepted and pins nothing (joining
// with it needs --insecure-skip-ca-pin). A secret with less than MinTokenBits of entropy
// is refused.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Token{}, errors.New("the join token is empty")
	}
	t := Token{Secret: s}
	if rest, ok := strings.CutPrefix(s, "FLO2:"); ok {
		parts := strings.Split(rest, ":")
		if len(parts) != 4 || parts[0] != "sha256" {
			return Token{}, errors.New("malformed join token: want FLO2:sha256:<hex>:<gossip key>:<secret>, as flotilla token rotate prints it")
		}
		key, err := hex.DecodeString(parts[2])
		if err != nil || len(key) != 32 {
			return Token{}, errors.New("malformed join token: its gossip key is not 64 hex digits; copy the whole token flotilla token rotate printed")
		}
		t = Token{CAPin: parts[0] + ":" + parts[1], GossipKey: key, Secret: parts[3]}
	} else if strings.HasPrefix(s, "FLO1:") {
		rest := strings.TrimPrefix(s, "FLO1:")
		i := strings.LastIndex(rest, ":")
		if i < 0 || !strings.HasPrefix(rest, "sha256:") {
			return Token{}, errors.New("malformed join token: want FLO1:sha256:<hex>:<secret>, as written to <data-dir>/token by the first host")
		}
		t = Token{CAPin: rest[:i], Secret: rest[i+1:]}
	}
	if bits := SecretBits(t.Secret); bits < MinTokenBits {
		return Token{}, fmt.Errorf("the join token's secret has about %d bits of entropy, at least %d are needed: use the token the first host wrote to <data-dir>/token, or a secret of 32 or more random hex characters (openssl rand -hex 24)", int(bits), MinTokenBits)
	}
	return t, nil
}

// SecretBits estimates the entropy of a secret as if its characters were drawn at random
// from the smallest usual alphabet holding them all (hex, alphanumerics, printable ASCII).
// A secret made of few distinct characters counts as if drawn from those only, and a
// secret that repeats a shorter one counts as that one, so "aaaa...a" and "abab...ab" are
// weak however long.
func SecretBits(s string) float64 {
	return alphabetBits(s[:period(s)])
}

// period is the length of the shortest prefix whose repetition makes up s (the whole
// length when none does), from the Knuth-Morris-Pratt failure function.
func period(s string) int {
	n := len(s)
	if n == 0 {
		return 0
	}
	fail := make([]int, n)
	for i, k := 1, 0; i < n; i++ {
		for k > 0 && s[i] != s[k] {
			k = fail[k-1]
		}
		if s[i] == s[k] {
			k++
		}
		fail[i] = k
	}
	return n - fail[n-1]
}

func alphabetBits(s string) float64 {
	distinct := map[rune]bool{}
	var lower, upper, digit, hexLetters, other bool
	for _, r := range s {
		distinct[r] = true
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'f', r >= 'A' && r <= 'F':
			hexLetters = true
			if r >= 'a' {
				lower = true
			} else {
				upper = true
			}
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		default:
			other = true
		}
	}
	alphabet := 0
	switch {
	case !other && !(lower && upper) && (digit || hexLetters) && onlyHex(s):
		alphabet = 16
	default:
		if lower {
			alphabet += 26
		}
		if upper {
			alphabet += 26
		}
		if digit {
			alphabet += 10
		}
		if other {
			alphabet += 33
		}
	}
	if len(distinct)*4 < alphabet {
		// Few distinct characters: no better than an alphabet of those.
		alphabet = max(len(distinct), 1)
	}
	if alphabet <= 1 {
		return 0
	}
	return float64(len([]rune(s))) * math.Log2(float64(alphabet))
}

func onlyHex(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return false
		}
	}
	return true
}

func (t Token) String() string {
	switch {
	case t.GossipKey != nil:
		return "FLO2:" + t.CAPin + ":" + hex.EncodeToString(t.GossipKey) + ":" + t.Secret
	case t.CAPin == "":
		return t.Secret
	}
	return "FLO1:" + t.CAPin + ":" + t.Secret
}

// JoinRequest is what a joining host sends.
type JoinRequest struct {
	Name      string `json:"name"`
	PeerURL   string `json:"peerURL"`
	ClientURL string `json:"clientURL"`
	// WantMember asks for an etcd membership (granted while the site has fewer than its
	// voter target).
	WantMember bool `json:"wantMember"`
	// Worker asks to join as a host that never holds etcd (--etcd=false): it receives only
	// its own certificates, signed from CSRs (PEM, by purpose: see WorkerCertificates).
	Worker bool              `json:"worker,omitempty"`
	CSRs   map[string][]byte `json:"csrs,omitempty"`
}

// WorkerCertificates are the purposes a worker asks certificates for: the node identity
// (client, CN system:node:<name>, O system:nodes) and the node agent's serving certificate.
var WorkerCertificates = []string{"client", "serving"}

// JoinResponse hands the joining host what it needs to be part of the site.
type JoinResponse struct {
	CACert     []byte `json:"caCert"`
	CAKey      []byte `json:"caKey"`
	AdminToken string `json:"adminToken"`
	// Member is true when the host was added as an etcd learner; InitialCluster then lists
	// every member for its first start.
	Member         bool     `json:"member"`
	InitialCluster string   `json:"initialCluster,omitempty"`
	ClientURLs     []string `json:"clientURLs"`
	// Certificates are a worker's signed certificates (PEM), by purpose.
	Certificates map[string][]byte `json:"certificates,omitempty"`
}

// JoinServer answers joining hosts. It is mounted outside the API's authentication chain:
// it authenticates the join token itself.
type JoinServer struct {
	CA         *pki.CA
	Token      Token
	AdminToken string
	Client     *clientv3.Client
	Voters     int
	// SignWorker has a worker's certificate requests signed (as CertificateSigningRequests
	// the join token approves) and returns the certificates by purpose; nil refuses workers.
	SignWorker func(ctx context.Context, name string, csrs map[string][]byte) (map[string][]byte, error)
	// Policy, when set, decides on the token and the host's name instead of Token: the
	// site's current token (after flotilla token rotate) and its removed hosts.
	Policy *hostaccess.Policy
	mu     sync.Mutex
}

// Paths served by JoinServer.
const (
	CACertsPath = "/cacerts"
	JoinPath    = "/flotilla/v1/join"
)

func (s *JoinServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case CACertsPath:
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(s.CA.CertPEM)
	case JoinPath:
		s.join(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *JoinServer) join(w http.ResponseWriter, r *http.Request) {
	log := logrus.WithField("remote", r.RemoteAddr)
	if r.Method != http.MethodPost {
		http.Error(w, "POST a JoinRequest", http.StatusMethodNotAllowed)
		return
	}
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.Policy == nil && subtle.ConstantTimeCompare([]byte(got), []byte(s.Token.Secret)) != 1 {
		log.Warn("join refused: wrong token")
		http.Error(w, "join refused: the token does not match this site's (check --token-file)", http.StatusUnauthorized)
		return
	}
	var req JoinRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Name == "" {
		http.Error(w, "bad join request: want JSON with name, peerURL, clientURL", http.StatusBadRequest)
		return
	}
	if s.Policy != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		err := s.Policy.Admit(ctx, got, req.Name)
		cancel()
		var removed *hostaccess.RemovedError
		switch {
		case errors.Is(err, hostaccess.ErrWrongToken):
			log.Warn("join refused: wrong token")
			http.Error(w, "join refused: "+err.Error(), http.StatusUnauthorized)
			return
		case errors.As(err, &removed):
			log.WithField("host", req.Name).Warn("join refused: the host was removed")
			http.Error(w, "join refused: "+err.Error(), http.StatusForbidden)
			return
		case err != nil:
			http.Error(w, "join: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		// A removed host that presents a newer token is readmitted (gossip takes it back).
		defer func() {
			if err := s.Policy.Admitted(context.WithoutCancel(r.Context()), req.Name); err != nil {
				log.WithError(err).WithField("host", req.Name).Warn("record a removed host's readmission")
			}
		}()
	}
	if req.Worker {
		s.joinWorker(w, r, req)
		return
	}
	keyPEM, err := s.CA.KeyPEM()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp := JoinResponse{CACert: s.CA.CertPEM, CAKey: keyPEM, AdminToken: s.AdminToken}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	members, err := s.Client.MemberList(ctx)
	if err != nil {
		http.Error(w, "etcd is unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	existing := false
	for _, m := range members.Members {
		if m.Name == req.Name || contains(m.PeerURLs, req.PeerURL) {
			existing = true
		}
	}
	if req.WantMember && !existing && len(members.Members) < s.Voters {
		// etcd takes one learner at a time. Proposing a second one is refused only when the
		// proposal is applied, and the refused entry stays in the raft log: every member that
		// replays it after a restart dials a member that never existed. Ask the host to
		// retry instead, before anything is proposed.
		for _, m := range members.Members {
			if m.IsLearner {
				http.Error(w, fmt.Sprintf("another host (%s) is joining the etcd cluster now: retry", learnerName(m)), http.StatusServiceUnavailable)
				return
			}
		}
		if _, err := s.Client.MemberAddAsLearner(ctx, []string{req.PeerURL}); err != nil {
			http.Error(w, "add etcd learner: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		existing = true
		members, err = s.Client.MemberList(ctx)
		if err != nil {
			http.Error(w, "etcd is unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		log.WithField("host", req.Name).Info("added as etcd learner")
	}
	resp.Member = existing && req.WantMember
	var parts []string
	for _, m := range members.Members {
		name := m.Name
		if name == "" && contains(m.PeerURLs, req.PeerURL) {
			name = req.Name
		}
		if name == "" {
			continue // another learner that has not started yet
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
		resp.ClientURLs = append(resp.ClientURLs, m.ClientURLs...)
	}
	sort.Strings(parts)
	resp.InitialCluster = strings.Join(parts, ",")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// joinWorker answers a worker: its certificates and the CA certificate, nothing else.
func (s *JoinServer) joinWorker(w http.ResponseWriter, r *http.Request, req JoinRequest) {
	log := logrus.WithFields(logrus.Fields{"remote": r.RemoteAddr, "host": req.Name})
	if s.SignWorker == nil {
		http.Error(w, "this host cannot admit workers", http.StatusNotImplemented)
		return
	}
	for _, purpose := range WorkerCertificates {
		if len(req.CSRs[purpose]) == 0 {
			http.Error(w, fmt.Sprintf("bad join request: a worker sends a %q certificate request", purpose), http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 45*time.Second)
	defer cancel()
	members, err := s.Client.MemberList(ctx)
	if err != nil {
		http.Error(w, "etcd is unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	for _, m := range members.Members {
		if m.Name == req.Name {
			http.Error(w, fmt.Sprintf("%s is an etcd member of this site: it cannot join again as a worker (use another name, or remove it first)", req.Name), http.StatusConflict)
			return
		}
	}
	certs, err := s.SignWorker(ctx, req.Name, req.CSRs)
	if err != nil {
		log.WithError(err).Warn("worker join: certificates not signed")
		http.Error(w, "sign the worker's certificates: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	log.Info("worker joined: its certificates are signed")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(JoinResponse{CACert: s.CA.CertPEM, Certificates: certs})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// RequestJoin asks the host at apiURL (https://host:port) to let this host join. It first
// fetches the CA and checks it against the token's pin, then sends the secret over TLS
// verified with that CA.
func RequestJoin(ctx context.Context, apiURL string, token Token, req JoinRequest) (*JoinResponse, error) {
	if token.CAPin == "" && !token.SkipCAPin {
		return nil, errors.New("the join token has no CA pin (FLO1:sha256:<hex>:<secret>), so this host cannot tell the site from an impostor: use the token the first host wrote to <data-dir>/token, or pass --insecure-skip-ca-pin")
	}
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	caReq, _ := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+CACertsPath, nil)
	caResp, err := insecure.Do(caReq)
	if err != nil {
		return nil, fmt.Errorf("fetch the site CA from %s: %w", apiURL, err)
	}
	caPEM, err := io.ReadAll(io.LimitReader(caResp.Body, 1<<16))
	caResp.Body.Close()
	if err != nil || caResp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the site CA from %s: status %d", apiURL, caResp.StatusCode)
	}
	if token.CAPin != "" {
		pin, err := pki.HashPEM(caPEM)
		if err != nil || pin != token.CAPin {
			return nil, fmt.Errorf("the CA of %s (%s) is not the one the join token pins (%s): wrong site or wrong token", apiURL, pin, token.CAPin)
		}
	} else {
		logrus.WithField("api", apiURL).Warn("join token has no CA pin: trusting the CA the site presents")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the site CA is not PEM")
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body, _ := json.Marshal(req)
	jr, _ := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+JoinPath, bytes.NewReader(body))
	jr.Header.Set("Authorization", "Bearer "+token.Secret)
	jr.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(jr)
	if err != nil {
		return nil, fmt.Errorf("join through %s: %w", apiURL, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("join through %s refused (%d): %s", apiURL, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	var out JoinResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("join through %s: bad response: %w", apiURL, err)
	}
	return &out, nil
}

// ClusterState is what a host remembers about its place in the site (DIR/cluster.json).
type ClusterState struct {
	Member bool `json:"member"`
	// Worker is set on a host that joined with --etcd=false: it never holds etcd.
	Worker     bool     `json:"worker,omitempty"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	// PeerURL is the peer URL this member last advertised; a change means the host's
	// address changed and the cluster must learn the new one.
	PeerURL string `json:"peerURL,omitempty"`
}

// LoadClusterState reads path; a missing file means a new host.
func LoadClusterState(path string) (*ClusterState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s ClusterState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// Save writes the state atomically.
func (s *ClusterState) Save(path string) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// learnerName names a learner for a message: its name, or its peer URL before it started.
func learnerName(m *etcdserverpb.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return strings.Join(m.PeerURLs, ",")
}

package runtime

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"sigs.k8s.io/yaml"
)

// RegistryConfig is a host's registries.yaml, in the format of k3s's: mirrors name the endpoints
// an image's registry is pulled from, configs the credentials and TLS settings of a registry
// host (an endpoint's host:port, or the registry's own name).
//
//	mirrors:
//	  docker.io:
//	    endpoint: ["https://mirror.example.com:5000"]
//	  registry.local:5000:
//	    endpoint: ["http://registry.local:5000"]   # plain HTTP only when said so
//	configs:
//	  mirror.example.com:5000:
//	    auth: {username: edge, password: secret}
//	    tls: {ca_file: /etc/flotilla/registry-ca.pem}
type RegistryConfig struct {
	Mirrors map[string]RegistryMirror     `json:"mirrors,omitempty"`
	Configs map[string]RegistryHostConfig `json:"configs,omitempty"`

	// tls holds the TLS client configuration built from Configs[host].TLS at load.
	tls map[string]*tls.Config
}

// RegistryMirror lists the endpoints (URLs: scheme, host[:port], optional path prefix) tried in
// order for a registry; the registry itself is tried last.
type RegistryMirror struct {
	Endpoints []string `json:"endpoint"`
}

// RegistryHostConfig is how to talk to one registry host.
type RegistryHostConfig struct {
	Auth *RegistryAuth `json:"auth,omitempty"`
	TLS  *RegistryTLS  `json:"tls,omitempty"`
}

// RegistryAuth are the credentials for one registry host: username and password, or auth
// (base64 of "username:password", as in a docker config), or an identity token.
type RegistryAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
}

// RegistryTLS is the TLS client configuration of one registry host.
type RegistryTLS struct {
	CAFile             string `json:"ca_file,omitempty"`
	CertFile           string `json:"cert_file,omitempty"`
	KeyFile            string `json:"key_file,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
}

// Credential is what a registry is offered: a username and password, or an identity token
// (OAuth2 refresh token).
type Credential struct {
	Username, Password, IdentityToken string
}

func (c Credential) empty() bool {
	return c.Username == "" && c.Password == "" && c.IdentityToken == ""
}

// LoadRegistryConfig reads and checks a registries.yaml; errors name the file and the field.
func LoadRegistryConfig(path string) (*RegistryConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry config: %w", err)
	}
	c, err := ParseRegistryConfig(data)
	if err != nil {
		return nil, fmt.Errorf("registry config %s: %w", path, err)
	}
	return c, nil
}

// ParseRegistryConfig parses and checks a registries.yaml document. Unknown fields are errors,
// so a misspelt setting is not silently ignored.
func ParseRegistryConfig(data []byte) (*RegistryConfig, error) {
	c := &RegistryConfig{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("not a registries.yaml (mirrors: {HOST: {endpoint: [URL]}}, configs: {HOST: {auth: {...}, tls: {...}}}): %w", err)
	}
	for _, host := range sortedKeys(c.Mirrors) {
		if err := checkRegistryHost(host, true); err != nil {
			return nil, fmt.Errorf("mirrors.%q: %w", host, err)
		}
		for i, ep := range c.Mirrors[host].Endpoints {
			if _, err := parseEndpoint(ep); err != nil {
				return nil, fmt.Errorf("mirrors.%q.endpoint[%d]: %w", host, i, err)
			}
		}
	}
	c.tls = map[string]*tls.Config{}
	for _, host := range sortedKeys(c.Configs) {
		if err := checkRegistryHost(host, false); err != nil {
			return nil, fmt.Errorf("configs.%q: %w", host, err)
		}
		hc := c.Configs[host]
		if a := hc.Auth; a != nil {
			if _, err := a.credential(); err != nil {
				return nil, fmt.Errorf("configs.%q.auth.%w", host, err)
			}
		}
		if t := hc.TLS; t != nil {
			cfg, err := t.config()
			if err != nil {
				return nil, fmt.Errorf("configs.%q.tls.%w", host, err)
			}
			c.tls[host] = cfg
		}
	}
	return c, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkRegistryHost refuses keys that are not a host[:port] ("*" is allowed for mirrors: every
// registry without mirrors of its own).
func checkRegistryHost(host string, wildcard bool) error {
	if wildcard && host == "*" {
		return nil
	}
	if host == "" || strings.ContainsAny(host, "/@ ") || strings.Contains(host, "://") {
		return errors.New("not a registry host[:port] (no scheme, no path)")
	}
	if h, p, err := net.SplitHostPort(host); err == nil && (h == "" || p == "") {
		return errors.New("not a registry host[:port]")
	}
	return nil
}

// parseEndpoint checks a mirror endpoint URL: http or https, a host, and at most a path prefix.
func parseEndpoint(ep string) (*url.URL, error) {
	u, err := url.Parse(ep)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: give a URL with http:// or https:// (plain HTTP only when written so)", ep)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: give scheme://host[:port][/path], no credentials (they go under configs), query or fragment", ep)
	}
	return u, nil
}

func (a *RegistryAuth) credential() (Credential, error) {
	c := Credential{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
	if a.Auth != "" {
		if a.Username != "" || a.Password != "" {
			return c, errors.New("auth: give either auth or username and password")
		}
		user, pass, err := decodeAuth(a.Auth)
		if err != nil {
			return c, fmt.Errorf("auth: %w", err)
		}
		c.Username, c.Password = user, pass
	}
	if c.IdentityToken == "" && (c.Username == "") != (c.Password == "") {
		return c, errors.New("password: give both username and password")
	}
	return c, nil
}

// decodeAuth decodes a docker config "auth": base64 of "username:password".
func decodeAuth(s string) (string, string, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return "", "", errors.New("not base64 of username:password")
	}
	user, pass, ok := strings.Cut(string(b), ":")
	if !ok || user == "" {
		return "", "", errors.New("not base64 of username:password")
	}
	return user, pass, nil
}

func (t *RegistryTLS) config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} // #nosec G402 -- asked for in the file
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file: %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("key_file: give both cert_file and key_file for a client certificate")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Credential returns the registry file's credentials for a registry host, if any. Docker Hub's
// are found under docker.io, registry-1.docker.io or index.docker.io.
func (c *RegistryConfig) Credential(host string) (Credential, bool) {
	if c == nil {
		return Credential{}, false
	}
	for _, h := range hostAliases(host) {
		if hc, ok := c.Configs[h]; ok && hc.Auth != nil {
			cred, err := hc.Auth.credential()
			return cred, err == nil && !cred.empty()
		}
	}
	return Credential{}, false
}

func (c *RegistryConfig) tlsConfig(host string) *tls.Config {
	if c == nil {
		return nil
	}
	for _, h := range hostAliases(host) {
		if t := c.tls[h]; t != nil {
			return t
		}
	}
	return nil
}

func hostAliases(host string) []string {
	switch host {
	case "docker.io", "registry-1.docker.io", "index.docker.io":
		return []string{host, "docker.io", "registry-1.docker.io", "index.docker.io"}
	}
	return []string{host}
}

// endpoint is one place a registry's content is pulled from.
type endpoint struct {
	scheme, host, path string
	// upstream: the registry itself, not a mirror; pull secrets' credentials go only there.
	upstream bool
}

// endpoints returns where to pull the images of registry (a reference's domain) from: its
// mirrors in order, then the registry itself over HTTPS unless a mirror entry is the registry
// itself (e.g. plain http://host:port).
func (c *RegistryConfig) endpoints(registry string) []endpoint {
	var out []endpoint
	var mirrors []string
	if c != nil {
		m, ok := c.Mirrors[registry]
		if !ok {
			m = c.Mirrors["*"]
		}
		mirrors = m.Endpoints
	}
	self := false
	for _, ep := range mirrors {
		u, err := parseEndpoint(ep)
		if err != nil {
			continue // refused at load
		}
		p := strings.TrimSuffix(u.Path, "/")
		if !strings.HasSuffix(p, "/v2") {
			p += "/v2"
		}
		e := endpoint{scheme: u.Scheme, host: u.Host, path: p, upstream: u.Host == upstreamHost(registry)}
		self = self || e.upstream
		out = append(out, e)
	}
	if !self {
		out = append(out, endpoint{scheme: "https", host: upstreamHost(registry), path: "/v2", upstream: true})
	}
	return out
}

func upstreamHost(registry string) string {
	if registry == "docker.io" {
		return "registry-1.docker.io"
	}
	return registry
}

// registryHosts returns containerd's view of where to pull from: the endpoints of each
// registry, each with its own TLS configuration and credentials (upstream for the registry
// itself when set: a pull secret's, else the registry file's).
func (c *RegistryConfig) registryHosts(upstream *Credential) docker.RegistryHosts {
	return func(registry string) ([]docker.RegistryHost, error) {
		var hosts []docker.RegistryHost
		for _, e := range c.endpoints(registry) {
			tr := docker.DefaultHTTPTransport(nil)
			if t := c.tlsConfig(e.host); t != nil {
				tr.TLSClientConfig = t.Clone()
			}
			client := &http.Client{Transport: tr}
			opts := []docker.AuthorizerOpt{docker.WithAuthClient(client)}
			if cred, ok := c.endpointCredential(e, registry, upstream); ok {
				opts = append(opts, docker.WithAuthCreds(func(string) (string, string, error) {
					if cred.IdentityToken != "" {
						return "", cred.IdentityToken, nil
					}
					return cred.Username, cred.Password, nil
				}))
			}
			caps := docker.HostCapabilityPull | docker.HostCapabilityResolve
			hosts = append(hosts, docker.RegistryHost{
				Client: client, Authorizer: docker.NewDockerAuthorizer(opts...),
				Host: e.host, Scheme: e.scheme, Path: e.path, Capabilities: caps,
			})
		}
		return hosts, nil
	}
}

// endpointCredential picks what an endpoint is offered: for the registry itself the pull
// secret's credentials when given, else the registry file's for the endpoint's host (for the
// registry itself also under the registry's name).
func (c *RegistryConfig) endpointCredential(e endpoint, registry string, upstream *Credential) (Credential, bool) {
	if e.upstream && upstream != nil {
		return *upstream, !upstream.empty()
	}
	if cred, ok := c.Credential(e.host); ok {
		return cred, true
	}
	if e.upstream {
		return c.Credential(registry)
	}
	return Credential{}, false
}

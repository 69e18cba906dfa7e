package runtime

import (
	"encoding/base64"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
)

func TestParseRegistryConfig(t *testing.T) {
	dir := t.TempDir()
	ca, key := framework.SelfSignedCert(t, dir, "test", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	good := `
mirrors:
  docker.io:
    endpoint: ["https://mirror.example.com:5000/prefix", "http://10.0.0.254:5000"]
  registry.local:5000:
    endpoint: ["http://registry.local:5000"]
configs:
  mirror.example.com:5000:
    auth: {username: edge, password: secret}
    tls: {ca_file: ` + ca + `, cert_file: ` + ca + `, key_file: ` + key + `}
  registry.local:5000:
    auth: {auth: ` + base64.StdEncoding.EncodeToString([]byte("bob:pw:with:colons")) + `}
  docker.io:
    auth: {identitytoken: tok}
  insecure.example.com:
    tls: {insecure_skip_verify: true}
`
	c, err := ParseRegistryConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if cred, ok := c.Credential("registry.local:5000"); !ok || cred != (Credential{Username: "bob", Password: "pw:with:colons"}) {
		t.Errorf("registry.local:5000 credential = %+v, %v", cred, ok)
	}
	if cred, ok := c.Credential("registry-1.docker.io"); !ok || cred.IdentityToken != "tok" {
		t.Errorf("Docker Hub credential under docker.io = %+v, %v", cred, ok)
	}
	if _, ok := c.Credential("other.example.com"); ok {
		t.Error("a credential for an unconfigured host")
	}
	if tc := c.tlsConfig("mirror.example.com:5000"); tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.InsecureSkipVerify {
		t.Errorf("mirror TLS = %+v", tc)
	}
	if tc := c.tlsConfig("insecure.example.com"); tc == nil || !tc.InsecureSkipVerify {
		t.Errorf("insecure TLS = %+v", tc)
	}

	for _, tc := range []struct{ name, doc, want string }{
		{"unknown top-level field", "mirror: {}", `unknown field "mirror"`},
		{"unknown auth field", "configs: {r.example.com: {auth: {user: x}}}", `unknown field "user"`},
		{"endpoint without scheme", "mirrors: {docker.io: {endpoint: [mirror.example.com]}}", `mirrors."docker.io".endpoint[0]`},
		{"endpoint with credentials", "mirrors: {docker.io: {endpoint: ['https://u:p@m.example.com']}}", `mirrors."docker.io".endpoint[0]`},
		{"mirror key with a scheme", "mirrors: {'https://docker.io': {endpoint: ['https://m.example.com']}}", `mirrors."https://docker.io"`},
		{"missing CA file", "configs: {r.example.com: {tls: {ca_file: /nonexistent/ca.pem}}}", `configs."r.example.com".tls.ca_file`},
		{"CA file not PEM", "configs: {r.example.com: {tls: {ca_file: " + key + "x}}}", `configs."r.example.com".tls.ca_file`},
		{"cert without key", "configs: {r.example.com: {tls: {cert_file: " + ca + "}}}", `configs."r.example.com".tls.key_file`},
		{"auth not base64", "configs: {r.example.com: {auth: {auth: '!!'}}}", `configs."r.example.com".auth.auth`},
		{"auth and username", "configs: {r.example.com: {auth: {auth: " + base64.StdEncoding.EncodeToString([]byte("a:b")) + ", username: a}}}", `configs."r.example.com".auth.auth`},
		{"username without password", "configs: {r.example.com: {auth: {username: a}}}", `configs."r.example.com".auth.password`},
	} {
		_, err := ParseRegistryConfig([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.want)
		}
	}

	if _, err := LoadRegistryConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestRegistryEndpoints(t *testing.T) {
	c, err := ParseRegistryConfig([]byte(`
mirrors:
  docker.io:
    endpoint: ["https://mirror.example.com:5000/prefix/"]
  registry.local:5000:
    endpoint: ["http://registry.local:5000"]
  "*":
    endpoint: ["https://catchall.example.com"]
configs:
  mirror.example.com:5000: {auth: {username: m, password: mp}}
  registry.local:5000: {auth: {username: l, password: lp}}
  docker.io: {auth: {username: d, password: dp}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		registry string
		want     []endpoint
	}{
		{"docker.io", []endpoint{{"https", "mirror.example.com:5000", "/prefix/v2", false}, {"https", "registry-1.docker.io", "/v2", true}}},
		{"registry.local:5000", []endpoint{{"http", "registry.local:5000", "/v2", true}}},
		{"ghcr.io", []endpoint{{"https", "catchall.example.com", "/v2", false}, {"https", "ghcr.io", "/v2", true}}},
	} {
		if got := c.endpoints(tc.registry); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("endpoints(%s) = %+v, want %+v", tc.registry, got, tc.want)
		}
	}
	// No file: the registry itself over HTTPS, even on loopback.
	var none *RegistryConfig
	if got := none.endpoints("127.0.0.1:5000"); !reflect.DeepEqual(got, []endpoint{{"https", "127.0.0.1:5000", "/v2", true}}) {
		t.Errorf("endpoints without a file = %+v", got)
	}

	secret := &Credential{Username: "s", Password: "sp"}
	eps := c.endpoints("docker.io")
	for _, tc := range []struct {
		name     string
		e        endpoint
		registry string
		upstream *Credential
		want     Credential
		ok       bool
	}{
		{"mirror gets its own, never the secret's", eps[0], "docker.io", secret, Credential{Username: "m", Password: "mp"}, true},
		{"upstream gets the secret's", eps[1], "docker.io", secret, *secret, true},
		{"upstream without a secret: the file's under docker.io", eps[1], "docker.io", nil, Credential{Username: "d", Password: "dp"}, true},
		{"plain-http registry: the file's", c.endpoints("registry.local:5000")[0], "registry.local:5000", nil, Credential{Username: "l", Password: "lp"}, true},
		{"plain-http registry: the secret's first", c.endpoints("registry.local:5000")[0], "registry.local:5000", secret, *secret, true},
		{"nothing configured", c.endpoints("ghcr.io")[1], "ghcr.io", nil, Credential{}, false},
	} {
		got, ok := c.endpointCredential(tc.e, tc.registry, tc.upstream)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDockerConfigCredentials(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	dc, err := ParseDockerConfigJSON([]byte(`{"auths": {
		"https://index.docker.io/v1/": {"auth": "` + b64("hub:hp") + `"},
		"registry.example.com:5000": {"username": "port", "password": "pp"},
		"registry.example.com": {"username": "noport", "password": "np"},
		"registry.example.com/team": {"username": "team", "password": "tp"},
		"*.corp.example": {"username": "glob", "password": "gp"},
		"empty.example.com": {}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := func(u, p string) Credential { return Credential{Username: u, Password: p} }
	for _, tc := range []struct {
		image string
		want  []Credential
	}{
		{"nginx", []Credential{c("hub", "hp")}},
		{"docker.io/library/nginx:1.27", []Credential{c("hub", "hp")}},
		{"registry.example.com:5000/app:v1", []Credential{c("port", "pp")}},
		{"registry.example.com/team/app:v1", []Credential{c("team", "tp"), c("noport", "np")}},
		{"registry.example.com/teamx/app", []Credential{c("noport", "np")}},
		{"a.corp.example/app", []Credential{c("glob", "gp")}},
		{"a.b.corp.example/app", []Credential{}},
		{"ghcr.io/x/y", []Credential{}},
	} {
		if got := dc.Credentials(tc.image); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Credentials(%s) = %+v, want %+v", tc.image, got, tc.want)
		}
	}

	legacy, err := ParseDockerCfg([]byte(`{"registry.example.com": {"auth": "` + b64("old:op") + `", "email": "a@b"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := legacy.Credentials("registry.example.com/app"); !reflect.DeepEqual(got, []Credential{c("old", "op")}) {
		t.Errorf("dockercfg credentials = %+v", got)
	}
	for _, bad := range []struct{ doc, want string }{
		{`{"auths": {"r.example.com": {"auth": "nope"}}}`, `"r.example.com".auth`},
		{`not json`, ".dockerconfigjson"},
	} {
		if _, err := ParseDockerConfigJSON([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseDockerConfigJSON(%s) = %v, want an error naming %s", bad.doc, err, bad.want)
		}
	}
}

func TestSideLoadedNames(t *testing.T) {
	for ref, want := range map[string]bool{
		"flotilla.local/hello:latest": true, "flotilla.local/a/b": true,
		"nginx": false, "registry.example.com/flotilla.local/x": false, "flotilla.localhost/x": false,
	} {
		if got := IsSideLoadedName(ref); got != want {
			t.Errorf("IsSideLoadedName(%s) = %v", ref, got)
		}
	}
}

func TestIsAuthError(t *testing.T) {
	for msg, want := range map[string]bool{
		"unexpected status from HEAD request to https://r/v2/x/manifests/v1: 401 Unauthorized":             true,
		"pull access denied, repository does not exist or may require authorization: authorization failed": true,
		"r/x:v1: not found": false,
		"dial tcp 10.0.0.1:443: connect: connection refused": false,
	} {
		if got := isAuthError(errorString(msg)); got != want {
			t.Errorf("isAuthError(%q) = %v", msg, got)
		}
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

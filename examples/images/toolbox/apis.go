package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// The webhook and apiserver commands serve HTTPS with the certificate in $TLS_CERT and
// $TLS_KEY (PEM), or a self-signed one when they are empty.

// webhook serves admission webhooks for tests:
//
//	/validate  denies objects labelled deny=true, allows everything else
//	/mutate    adds the annotation toolbox.flotilla.dev/mutated=true
//	/slow      answers after 15 s (for timeoutSeconds and failurePolicy)
//	/convert   CRD conversion between v1 (spec.colour) and v2 (spec.color) of any group
func webhook(port string) int {
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", review(func(obj objectMeta) reviewResponse {
		if obj.Metadata.Labels["deny"] == "true" {
			return reviewResponse{Allowed: false, Status: &status{Code: 403, Message: "denied by toolbox: the object has the label deny=true"}}
		}
		return reviewResponse{Allowed: true}
	}))
	mux.HandleFunc("/mutate", review(func(obj objectMeta) reviewResponse {
		patch := []map[string]any{}
		if obj.Metadata.Annotations == nil {
			patch = append(patch, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{}})
		}
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/annotations/toolbox.flotilla.dev~1mutated", "value": "true"})
		raw, _ := json.Marshal(patch)
		pt := "JSONPatch"
		return reviewResponse{Allowed: true, PatchType: &pt, Patch: base64.StdEncoding.EncodeToString(raw)}
	}))
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(15 * time.Second)
		review(func(objectMeta) reviewResponse { return reviewResponse{Allowed: true} })(w, r)
	})
	mux.HandleFunc("/convert", convert)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return serveTLS(port, mux)
}

// convert answers an apiextensions.k8s.io/v1 ConversionReview: v2 calls spec.colour color.
func convert(w http.ResponseWriter, r *http.Request) {
	var in struct {
		APIVersion string `json:"apiVersion"`
		Request    struct {
			UID               string           `json:"uid"`
			DesiredAPIVersion string           `json:"desiredAPIVersion"`
			Objects           []map[string]any `json:"objects"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	from, to := "color", "colour"
	if strings.HasSuffix(in.Request.DesiredAPIVersion, "/v2") {
		from, to = "colour", "color"
	}
	out := make([]map[string]any, 0, len(in.Request.Objects))
	for _, obj := range in.Request.Objects {
		obj["apiVersion"] = in.Request.DesiredAPIVersion
		if spec, ok := obj["spec"].(map[string]any); ok {
			if v, ok := spec[from]; ok {
				spec[to] = v
				delete(spec, from)
			}
		}
		out = append(out, obj)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": in.APIVersion, "kind": "ConversionReview",
		"response": map[string]any{"uid": in.Request.UID, "convertedObjects": out, "result": map[string]any{"status": "Success"}}})
}

type objectMeta struct {
	Metadata struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

type status struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type reviewResponse struct {
	UID       string  `json:"uid"`
	Allowed   bool    `json:"allowed"`
	Status    *status `json:"status,omitempty"`
	PatchType *string `json:"patchType,omitempty"`
	Patch     string  `json:"patch,omitempty"`
}

// review decodes an admission.k8s.io/v1 AdmissionReview and answers it with decide.
func review(decide func(objectMeta) reviewResponse) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			APIVersion string `json:"apiVersion"`
			Request    struct {
				UID    string          `json:"uid"`
				Object json.RawMessage `json:"object"`
			} `json:"request"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var obj objectMeta
		_ = json.Unmarshal(in.Request.Object, &obj)
		resp := decide(obj)
		resp.UID = in.Request.UID
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": in.APIVersion, "kind": "AdmissionReview", "response": resp,
		})
	}
}

// apiserver serves a read-only aggregated API GROUP/VERSION with one namespaced resource,
// flavours, that always lists the same two objects.
func apiserver(port, group, version string) int {
	gv := group + "/" + version
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/apis/"+gv, func(w http.ResponseWriter, r *http.Request) {
		write(w, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
			"resources": []map[string]any{{"name": "flavours", "singularName": "flavour", "namespaced": true,
				"kind": "Flavour", "verbs": []string{"get", "list"}}}})
	})
	flavour := func(ns, name string) map[string]any {
		return map[string]any{"apiVersion": gv, "kind": "Flavour",
			"metadata": map[string]any{"name": name, "namespace": ns}, "taste": name}
	}
	mux.HandleFunc("/apis/"+gv+"/namespaces/{ns}/flavours", func(w http.ResponseWriter, r *http.Request) {
		ns := r.PathValue("ns")
		write(w, map[string]any{"apiVersion": gv, "kind": "FlavourList", "metadata": map[string]any{},
			"items": []any{flavour(ns, "sweet"), flavour(ns, "sour")}})
	})
	mux.HandleFunc("/apis/"+gv+"/namespaces/{ns}/flavours/{name}", func(w http.ResponseWriter, r *http.Request) {
		write(w, flavour(r.PathValue("ns"), r.PathValue("name")))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return serveTLS(port, mux)
}

func serveTLS(port string, h http.Handler) int {
	if port == "" {
		port = "8443"
	}
	cert, err := servingCert()
	if err != nil {
		return fail("serving certificate: %v", err)
	}
	srv := &http.Server{Addr: ":" + port, Handler: h, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	// PID 1 of a container gets no default SIGTERM handling: stop on it explicitly.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	go func() {
		<-stop
		_ = srv.Close()
	}()
	fmt.Printf("serving TLS on :%s\n", port)
	if err := srv.ListenAndServeTLS("", ""); err != nil && err != http.ErrServerClosed {
		return fail("%v", err)
	}
	return 0
}

func servingCert() (tls.Certificate, error) {
	if c, k := os.Getenv("TLS_CERT"), os.Getenv("TLS_KEY"); c != "" && k != "" {
		return tls.X509KeyPair([]byte(c), []byte(k))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolbox"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

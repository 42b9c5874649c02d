package handler_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "touba test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for cn (a server's for 127.0.0.1 when
// server is true) and returns it and its key as PEM.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// Mutual TLS: the binding verifies the server with its ca_file and
// presents its client certificate; a server that requires one runs the
// request only for a certificate its CA signed.
func TestHTTPMutualTLS(t *testing.T) {
	ca := newCA(t)
	serverCert, serverKey := ca.issue(t, "orders.test", true)
	clientCert, clientKey := ca.issue(t, "touba-client", false)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	var ran atomic.Int32
	var peer atomic.Value
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		peer.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		w.WriteHeader(http.StatusCreated)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	s.StartTLS()
	t.Cleanup(s.Close)

	r := mustHTTP(t, s.URL+"/orders/{/id}", func(sp *handler.HTTPSpec) {
		sp.CA, sp.ClientCert, sp.ClientKey = ca.pem, string(clientCert), string(clientKey)
	})
	res := r.Call(context.Background(), newRequest(t, `{"id": "o-1"}`, touba.RetryReconcile), func() error { return nil })
	if !res.OK || res.Outcome != touba.EffectApplied || peer.Load() != "touba-client" {
		t.Fatalf("with the client certificate: %+v (%v), peer %v", res, res.Err, peer.Load())
	}

	// Without the client certificate the server runs nothing.
	r = mustHTTP(t, s.URL+"/orders/{/id}", func(sp *handler.HTTPSpec) { sp.CA = ca.pem })
	res = r.Call(context.Background(), newRequest(t, `{"id": "o-2"}`, touba.RetryReconcile), func() error { return nil })
	if res.OK {
		t.Fatalf("without a client certificate: %+v", res)
	}
	// Without the CA file the server's certificate is not trusted: never
	// sent, not applied.
	r = mustHTTP(t, s.URL+"/orders/{/id}", func(sp *handler.HTTPSpec) {
		sp.ClientCert, sp.ClientKey, sp.MaxTries = string(clientCert), string(clientKey), 1
	})
	res = r.Call(context.Background(), newRequest(t, `{"id": "o-3"}`, touba.RetryReconcile), func() error { return nil })
	check(t, res, touba.EffectNotApplied, touba.EHandlerFailed, nil, 0)
	if n := ran.Load(); n != 1 {
		t.Fatalf("the server ran %d requests, want only the one with the client certificate", n)
	}
}

package tinystore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/locks"
	"tinystore.dev/tinystore/internal/testkit"
)

// servedWithToken owns a store whose only token is "data <token>" and
// serves it on TCP; gives its address.
func servedWithToken(t *testing.T, token string) string {
	t.Helper()
	ctx := context.Background()
	dir := testkit.Dir(t)
	if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte("data "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	owner, err := tinystore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := fmt.Sprintf("tcp:%s", l.Addr())
	l.Close()
	if err := owner.Serve(ctx, address); err != nil {
		t.Fatal(err)
	}
	return address
}

func TestSec01TwoStoresWithTwoTokensConnectedFromOneProcess(t *testing.T) {
	ctx := context.Background()
	t.Setenv("TINYSTORE_TOKEN", "")
	os.Unsetenv("TINYSTORE_TOKEN")
	a, b := servedWithToken(t, "token-of-a"), servedWithToken(t, "token-of-b")
	publish := func(s *tinystore.Store) {
		t.Helper()
		ch, err := channels.OpenChannel[int](s, "numbers")
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Publish(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	storeA, err := tinystore.Connect(ctx, a, tinystore.Token("token-of-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer storeA.Close()
	storeB, err := tinystore.Connect(ctx, b, tinystore.Token("token-of-b"), tinystore.RequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer storeB.Close()
	publish(storeA)
	publish(storeB)
	if _, err := tinystore.Connect(ctx, a, tinystore.Token("token-of-b")); !errors.Is(err, tinystore.ErrAuth) {
		t.Fatalf("a's address with b's token: %v, want ErrAuth", err)
	}
	if _, err := tinystore.Connect(ctx, b); !errors.Is(err, tinystore.ErrAuth) {
		t.Fatalf("no token at all: %v, want ErrAuth", err)
	}
	// The environment is the default; an option wins over it.
	t.Setenv("TINYSTORE_TOKEN", "token-of-b")
	fromEnv, err := tinystore.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer fromEnv.Close()
	given, err := tinystore.Connect(ctx, a, tinystore.Token("token-of-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer given.Close()
	publish(fromEnv)
	publish(given)
}

func TestConnectOptionsReachTheCore(t *testing.T) {
	ctx := context.Background()
	_, err := tinystore.Connect(ctx, "tls:127.0.0.1:1", tinystore.Token("t"), tinystore.CAFile(filepath.Join(testkit.Dir(t), "missing.pem")))
	if !errors.Is(err, tinystore.ErrIO) || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a CA file that is not there: %v, want ErrIO naming it", err)
	}
}

// holdOnce holds key "k" of lock "l" on store once and gives its fence.
func holdOnce(t *testing.T, store *tinystore.Store) locks.Fence {
	t.Helper()
	l, err := locks.OpenLock(store, "l", locks.TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var fence locks.Fence
	if err := l.Hold(context.Background(), "k", func(_ context.Context, lease *locks.Lease) error {
		fence = lease.Fence
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return fence
}

// With etcd's auth enabled on a cluster of the test's own (the shared one's
// tests would be locked out), EtcdUser's user and password hold a lock; a
// wrong password is ErrAuth saying etcd refused it, and so is none; the
// environment is the default, and the option wins over it.
func TestClusterConnectWithTheEtcdUserHoldsAndAWrongPasswordIsErrAuth(t *testing.T) {
	c := testkit.StartCluster(t)
	for _, args := range [][]string{{"user", "add", "root:rootpw"}, {"role", "add", "root"}, {"user", "grant-role", "root", "root"}, {"auth", "enable"}} {
		c.Etcdctl(t, args...)
	}
	t.Setenv("TINYSTORE_ETCD_USER", "")
	t.Setenv("TINYSTORE_ETCD_PASSWORD", "")
	ctx := context.Background()
	address := c.Address("auth")
	store, err := tinystore.Connect(ctx, address, tinystore.EtcdUser("root", "rootpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	fence := holdOnce(t, store)
	if fence.Hi != store.Epoch() {
		t.Fatalf("fence %v, epoch %d", fence, store.Epoch())
	}
	_, err = tinystore.Connect(ctx, address, tinystore.EtcdUser("root", "wrong"))
	if !errors.Is(err, tinystore.ErrAuth) || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("a wrong password: %v", err)
	}
	if _, err := tinystore.Connect(ctx, address); !errors.Is(err, tinystore.ErrAuth) {
		t.Fatalf("no user where auth is enabled: %v", err)
	}
	t.Setenv("TINYSTORE_ETCD_USER", "root")
	t.Setenv("TINYSTORE_ETCD_PASSWORD", "rootpw")
	fromEnv, err := tinystore.Connect(ctx, address)
	if err != nil {
		t.Fatal(err)
	}
	defer fromEnv.Close()
	if next := holdOnce(t, fromEnv); !fence.Less(next) {
		t.Fatalf("fence %v after %v", next, fence)
	}
	if _, err := tinystore.Connect(ctx, address, tinystore.EtcdUser("root", "wrong")); !errors.Is(err, tinystore.ErrAuth) {
		t.Fatalf("the option over the environment: %v", err)
	}
}

// EtcdIdentity's files reach the core: an unreadable certificate is
// ErrInvalid naming the file, before any member is asked.
func TestClusterConnectWithAnUnreadableClientCertificateIsErrInvalid(t *testing.T) {
	dir := testkit.Dir(t)
	ca := filepath.Join(dir, "ca.pem") // read, not parsed, before the certificate
	if err := os.WriteFile(ca, []byte("a CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-client.pem")
	_, err := tinystore.Connect(context.Background(), "etcds://127.0.0.1:1/x", tinystore.CAFile(ca), tinystore.EtcdIdentity(missing, filepath.Join(dir, "key.pem")))
	if !errors.Is(err, tinystore.ErrInvalid) || !strings.Contains(err.Error(), "no-client.pem") {
		t.Fatalf("%v", err)
	}
}

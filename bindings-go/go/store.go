package tinystore

import (
	"context"
	"time"

	"tinystore.dev/tinystore/internal/native"
)

// Store is an open store: owned by this process ([Open]) or reached in
// another process ([Connect]); both work the same. Safe for concurrent use.
type Store struct {
	n *native.Store
}

func init() {
	native.StoreOf = func(s any) *native.Store {
		if st, ok := s.(*Store); ok && st != nil {
			return st.n
		}
		return nil
	}
}

// Open opens the store directory dir (creating it if needed). If no live
// process owns it, this one does: channels and locks live in its memory,
// the epoch of its fences in dir/kv.db, SQL databases in dir/<name>.db,
// and it serves the store to other processes on dir/tinystore.sock. If
// another process owns it, Open connects to that one instead (STORE-01).
// A cluster store's address ("etcd://...", docs/cluster.md) given as dir
// is connected to, with [Connect]'s defaults from the environment.
//
// ctx bounds the wait: if it ends first (an owner that does not answer),
// Open returns ctx.Err() and closes the store it was opening once that
// call comes back.
//
// Errors: [ErrIO] (the directory cannot be made, locked or reached),
// [ErrSQL] (dir/kv.db is unreadable), [ErrOwned] (the owner cannot be
// reached); ctx.Err().
func Open(ctx context.Context, dir string) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := native.OpenStore(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &Store{n: n}, nil
}

// Connect reaches a store owned by another process at address, one of:
//
//   - "unix:PATH": a Unix socket; an owner serves "unix:<dir>/tinystore.sock"
//     (owner-only, mode 0600; no token).
//   - "tcp:HOST:PORT": plain TCP, with a token from the owner's dir/tokens
//     (`tinystore token new <dir>`): [Token], else the environment variable
//     TINYSTORE_TOKEN. Readable by anyone on the way: beyond loopback, use tls:.
//   - "tls:HOST:PORT": TCP inside TLS 1.2 or 1.3. The owner's certificate is
//     checked against the CA file of [CAFile], else the one the environment
//     variable TINYSTORE_CA names (no public roots are trusted), and against
//     HOST; the token is still needed. See docs/wire.md, "TLS", for making
//     a certificate and serving it.
//   - "etcd://HOST:PORT,HOST:PORT,.../PREFIX" ("etcds://" for TLS, with
//     [CAFile], and [EtcdIdentity] where the members ask for client
//     certificates): a cluster store, its locks, semaphores and fences in
//     an etcd cluster under /PREFIX/; etcd's user and password in
//     [EtcdUser]. Its channels are on the NATS JetStream servers of
//     "?nats=nats://HOST:PORT,..." ("tls://" for TLS), with [NatsUser],
//     [NatsToken], [NatsCredentials] or [NatsIdentity]; its SQL databases
//     are files on this machine. See docs/cluster.md.
//
// The options ([Token], [CAFile], [RequestTimeout], [EtcdUser],
// [EtcdIdentity], [NatsUser], [NatsToken], [NatsCredentials],
// [NatsIdentity]) override the
// environment for this store only, so one process can connect to two
// stores with two tokens. The store then works as an owned one; the engine
// reconnects by itself when the connection drops, and renews leases. ctx
// bounds the wait: if it ends first, Connect returns ctx.Err() and closes
// the connection once it comes back.
//
//	store, err := tinystore.Connect(ctx, "unix:data/tinystore.sock")
//	store, err := tinystore.Connect(ctx, "tls:db.example.com:7443",
//		tinystore.Token(token), tinystore.CAFile("ca.pem"), tinystore.RequestTimeout(5*time.Second))
//	store, err := tinystore.Connect(ctx, "etcds://10.0.0.1:2379,10.0.0.2:2379/myapp",
//		tinystore.CAFile("ca.pem"), tinystore.EtcdUser("app", password))
//
// Errors: [ErrInvalid] (the address, tls: or etcds:// without a CA file,
// an unreadable etcd TLS file), [ErrIO] (nobody listens, or the CA file is
// unreadable), [ErrAuth] (a missing or wrong token; a wrong etcd user or
// password; a certificate the CA did not sign or that does not name HOST;
// a client certificate etcd refused; NATS credentials the servers refused,
// the message saying what to give), [ErrUnavailable] (no etcd member
// answered within the request timeout), [ErrProtocol] (tcp: on a TLS
// port, or tls: on a plain one), ctx.Err().
func Connect(ctx context.Context, address string, options ...ConnectOption) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var o native.ConnectOptions
	for _, opt := range options {
		opt(&o)
	}
	n, err := native.ConnectStore(ctx, address, o)
	if err != nil {
		return nil, err
	}
	return &Store{n: n}, nil
}

// ConnectOption is an option of [Connect]: [Token], [CAFile],
// [RequestTimeout], [EtcdUser], [EtcdIdentity], [NatsUser], [NatsToken],
// [NatsCredentials] or [NatsIdentity]. One left out keeps its default.
type ConnectOption func(*native.ConnectOptions)

// Token is the token for tcp: and tls: addresses, a line of the owner's
// dir/tokens. Default: the environment variable TINYSTORE_TOKEN.
func Token(token string) ConnectOption {
	return func(o *native.ConnectOptions) { o.Token = &token }
}

// CAFile is, for tls: and etcds:// addresses, the PEM file of the CA
// certificate(s) to trust (for a self-signed store certificate, that
// certificate). Default: the file the environment variable TINYSTORE_CA
// names.
func CAFile(path string) ConnectOption {
	return func(o *native.ConnectOptions) { o.CAFile = &path }
}

// EtcdUser is, for etcd:// and etcds:// addresses, etcd's user and its
// password (etcd's own authentication: a user made with etcdctl user add).
// Default: the environment variables TINYSTORE_ETCD_USER and
// TINYSTORE_ETCD_PASSWORD (neither set: no authentication). A wrong user or
// password, or none where etcd has auth enabled, makes Connect fail with
// [ErrAuth].
func EtcdUser(user, password string) ConnectOption {
	return func(o *native.ConnectOptions) { o.EtcdUser, o.EtcdPassword = &user, &password }
}

// EtcdIdentity is, for etcds:// members that ask for client certificates
// (--client-cert-auth), this process's certificate and its private key:
// the paths of two PEM files, the certificate signed by the members' CA.
// Default: the files the environment variables TINYSTORE_ETCD_CERT and
// TINYSTORE_ETCD_KEY name. An unreadable file makes Connect fail with
// [ErrInvalid]; a certificate the members refuse, or none where they ask
// for one, with [ErrAuth] or [ErrUnavailable], the message naming the
// client certificate.
func EtcdIdentity(certFile, keyFile string) ConnectOption {
	return func(o *native.ConnectOptions) { o.EtcdCert, o.EtcdKey = &certFile, &keyFile }
}

// NatsUser is, for cluster addresses with ?nats=, NATS's user and its
// password (the servers' authorization { users = [...] }). Default: the
// environment variables TINYSTORE_NATS_USER and TINYSTORE_NATS_PASSWORD. A
// wrong one, or none where the servers ask, makes Connect fail with
// [ErrAuth], the message saying what to give.
func NatsUser(user, password string) ConnectOption {
	return func(o *native.ConnectOptions) { o.NatsUser, o.NatsPassword = &user, &password }
}

// NatsToken is, for cluster addresses with ?nats=, the servers' token
// (authorization { token: ... }). Default: TINYSTORE_NATS_TOKEN.
func NatsToken(token string) ConnectOption {
	return func(o *native.ConnectOptions) { o.NatsToken = &token }
}

// NatsCredentials is, for cluster addresses with ?nats=, the path of a
// NATS credentials file (its JWT and nkey seed). Default: the file
// TINYSTORE_NATS_CREDS names.
func NatsCredentials(path string) ConnectOption {
	return func(o *native.ConnectOptions) { o.NatsCredentials = &path }
}

// NatsIdentity is, for tls:// NATS servers that verify clients
// (tls { verify: true }), this process's certificate and private key: the
// paths of two PEM files (the CA is [CAFile]'s). Default: the files
// TINYSTORE_NATS_CERT and TINYSTORE_NATS_KEY name. With nats:// servers it
// is [ErrInvalid].
func NatsIdentity(certFile, keyFile string) ConnectOption {
	return func(o *native.ConnectOptions) { o.NatsCert, o.NatsKey = &certFile, &keyFile }
}

// RequestTimeout is how long a request may go unanswered (beyond a hold's
// wait) before it fails with [ErrTimeout]; whole milliseconds, checked
// every 250 ms. Default: 10 seconds; 0 or less keeps it.
func RequestTimeout(d time.Duration) ConnectOption {
	return func(o *native.ConnectOptions) { o.RequestTimeout = d }
}

// Serve serves the store on one more address for other processes to
// [Connect] to: "tcp:HOST:PORT" (needs dir/tokens; see `tinystore token
// new`), "tls:HOST:PORT" (also needs dir/tls/cert.pem and dir/tls/key.pem;
// docs/wire.md, "TLS") or "unix:PATH". Only an owner serves.
//
// Errors: [ErrInvalid] (the address, or a connected store), [ErrIO], [ErrAuth].
func (s *Store) Serve(ctx context.Context, address string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.n.Serve(ctx, address)
}

// Close closes the store: subscriptions end, held keys are let go (their
// holders' contexts are cancelled and their Hold returns [ErrLost]),
// waiters get [ErrClosed], and the directory is free for another owner.
// Over a connection, publishes already sent get their answers first (up
// to 2 s; one still unanswered then returns [ErrClosed]); calls made
// meanwhile return [ErrClosed] at once.
// Every later call on the store or anything opened from it fails with
// [ErrClosed]. Idempotent; it always returns nil.
func (s *Store) Close() error {
	s.n.Close()
	return nil
}

// Epoch is this open's epoch: the high 64 bits of every fence it gives,
// larger than the epoch of every earlier open of the directory.
func (s *Store) Epoch() uint64 { return s.n.Epoch() }

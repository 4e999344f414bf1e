package native

/*
#include <string.h>
#include "tinystore.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Store is a store handle. The C handle is freed when the Store is garbage;
// Close closes the store itself (the handle stays valid).
type Store struct {
	p *C.TsStore
	// Publishes of this store under way, to choose how the next one waits.
	publishing atomic.Int64
	// The last publish started without waiting went pending (a connected
	// store's do): the next one registers its token before the call.
	pendingLast atomic.Bool
}

func newStore(p *C.TsStore) *Store {
	s := &Store{p: p}
	runtime.AddCleanup(s, func(p *C.TsStore) { C.ts_store_free(p) }, p)
	return s
}

// OpenStore owns the store directory dir, or connects to its owner; ctx
// ends the wait (a frozen owner).
func OpenStore(ctx context.Context, dir string) (*Store, error) {
	return detach(ctx, func() (*Store, error) { return openStore(dir) }, (*Store).Close)
}

func openStore(dir string) (*Store, error) {
	var p *C.TsStore
	var e *C.TsError
	d, n := ptr(dir)
	if err := errorOf(C.ts_store_open(d, n, &p, &e), e); err != nil {
		return nil, err
	}
	return newStore(p), nil
}

// ConnectOptions are what ConnectStore takes instead of the core's
// defaults; nil fields keep them.
type ConnectOptions struct {
	Token           *string
	CAFile          *string
	RequestTimeout  time.Duration // 0: the default
	EtcdUser        *string
	EtcdPassword    *string
	EtcdCert        *string
	EtcdKey         *string
	NatsUser        *string
	NatsPassword    *string
	NatsToken       *string
	NatsCredentials *string
	NatsCert        *string
	NatsKey         *string
}

// ConnectStore connects to a store served at address; ctx ends the wait.
func ConnectStore(ctx context.Context, address string, o ConnectOptions) (*Store, error) {
	return detach(ctx, func() (*Store, error) { return connectStore(address, o) }, (*Store).Close)
}

func connectStore(address string, o ConnectOptions) (*Store, error) {
	var p *C.TsStore
	var e *C.TsError
	a, n := ptr(address)
	// Each option as C takes it: pointer, length, and whether it was given.
	given := func(v *string) (string, C.uint8_t) {
		if v == nil {
			return "", 0
		}
		return *v, 1
	}
	token, hasToken := given(o.Token)
	ca, hasCA := given(o.CAFile)
	user, hasUser := given(o.EtcdUser)
	password, hasPassword := given(o.EtcdPassword)
	cert, hasCert := given(o.EtcdCert)
	key, hasKey := given(o.EtcdKey)
	nUser, hasNUser := given(o.NatsUser)
	nPassword, hasNPassword := given(o.NatsPassword)
	nToken, hasNToken := given(o.NatsToken)
	nCreds, hasNCreds := given(o.NatsCredentials)
	nCert, hasNCert := given(o.NatsCert)
	nKey, hasNKey := given(o.NatsKey)
	ms := C.uint64_t(0)
	if o.RequestTimeout > 0 {
		ms = C.uint64_t(max(o.RequestTimeout.Milliseconds(), 1))
	}
	// opts is Go memory passed to C holding pointers to the strings: cgo
	// allows that only for pinned memory.
	var pins runtime.Pinner
	defer pins.Unpin()
	for _, s := range []string{token, ca, user, password, cert, key, nUser, nPassword, nToken, nCreds, nCert, nKey} {
		if len(s) > 0 {
			pins.Pin(unsafe.StringData(s))
		}
	}
	t, tn := ptr(token)
	c, cn := ptr(ca)
	u, un := ptr(user)
	pw, pwn := ptr(password)
	ce, cen := ptr(cert)
	k, kn := ptr(key)
	nu, nun := ptr(nUser)
	np, npn := ptr(nPassword)
	nt, ntn := ptr(nToken)
	ncr, ncrn := ptr(nCreds)
	nc, ncn := ptr(nCert)
	nk, nkn := ptr(nKey)
	opts := C.struct_TsConnectOptions{
		token: t, token_len: tn, has_token: hasToken,
		ca_file: c, ca_file_len: cn, has_ca_file: hasCA,
		request_timeout_ms: ms,
		etcd_user:          u, etcd_user_len: un, has_etcd_user: hasUser,
		etcd_password: pw, etcd_password_len: pwn, has_etcd_password: hasPassword,
		etcd_cert: ce, etcd_cert_len: cen, has_etcd_cert: hasCert,
		etcd_key: k, etcd_key_len: kn, has_etcd_key: hasKey,
		nats_user: nu, nats_user_len: nun, has_nats_user: hasNUser,
		nats_password: np, nats_password_len: npn, has_nats_password: hasNPassword,
		nats_token: nt, nats_token_len: ntn, has_nats_token: hasNToken,
		nats_credentials: ncr, nats_credentials_len: ncrn, has_nats_credentials: hasNCreds,
		nats_cert: nc, nats_cert_len: ncn, has_nats_cert: hasNCert,
		nats_key: nk, nats_key_len: nkn, has_nats_key: hasNKey,
	}
	code := C.ts_store_connect(a, n, &opts, &p, &e)
	if err := errorOf(code, e); err != nil {
		return nil, err
	}
	return newStore(p), nil
}

// Serve serves the store on one more address.
func (s *Store) Serve(ctx context.Context, address string) error {
	var e *C.TsError
	a, n := ptr(address)
	err := result(ctx, C.ts_store_serve(s.p, a, n, &e), e)
	runtime.KeepAlive(s)
	return err
}

// Status gives the store's status as JSON; ctx ends the wait for a
// connected store's owner.
func (s *Store) Status(ctx context.Context) ([]byte, error) {
	return detach(ctx, s.status, nil)
}

func (s *Store) status() ([]byte, error) {
	var out *C.char
	var e *C.TsError
	err := errorOf(C.ts_store_status(s.p, &out, &e), e)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	defer C.ts_string_free(out)
	return C.GoBytes(unsafe.Pointer(out), C.int(C.strlen(out))), nil
}

// Close closes the store; idempotent.
func (s *Store) Close() {
	C.ts_store_close(s.p)
	runtime.KeepAlive(s)
}

// Epoch is the high 64 bits of every fence this open gives.
func (s *Store) Epoch() uint64 {
	v := uint64(C.ts_store_epoch(s.p))
	runtime.KeepAlive(s)
	return v
}

// detach runs call, a call of the library that may wait but takes no
// cancel switch (the core's open, connect and status block their thread),
// so that ctx still ends the caller's wait: call then goes on in its own
// goroutine, bounded by the core's request timeout, and what it gives is
// handed to drop (nil: nothing to free). A ctx that can never end costs no
// goroutine.
func detach[T any](ctx context.Context, call func() (T, error), drop func(T)) (T, error) {
	if ctx.Done() == nil {
		return call()
	}
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := call()
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
		go func() {
			if a := <-ch; a.err == nil && drop != nil {
				drop(a.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// StoreOf gives the handle inside a *tinystore.Store; set by package
// tinystore, so the other public packages reach it without exporting it.
var StoreOf func(store any) *Store

// TxOf gives the handle inside a *sqldb.Tx; set by package sqldb.
var TxOf func(tx any) *Tx

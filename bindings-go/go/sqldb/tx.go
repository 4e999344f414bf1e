package sqldb

import (
	"context"

	"tinystore.dev/tinystore/internal/native"
)

// Tx is a transaction in progress, given to the function of [DB.Tx]; use it
// only inside that function. A channel publishes in it with In(tx).
type Tx struct {
	n *native.Tx
}

func init() {
	native.TxOf = func(t any) *native.Tx {
		if tx, ok := t.(*Tx); ok && tx != nil {
			return tx.n
		}
		return nil
	}
}

// Exec runs one statement inside the transaction. Errors as [DB.Exec].
func (tx *Tx) Exec(ctx context.Context, sql string, args ...any) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return result(tx.n.Exec(sql, args))
}

// Query runs a query inside the transaction; it sees the transaction's own
// writes. Errors as [DB.Exec].
func (tx *Tx) Query(ctx context.Context, sql string, args ...any) (*Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := tx.n.Query(sql, args)
	if err != nil {
		return nil, err
	}
	return &Rows{Columns: r.Columns, Values: r.Values}, nil
}

package native

/*
#include "tinystore.h"
*/
import "C"

import (
	"database/sql/driver"
	"fmt"
	"unsafe"
)

// values are keys or SQL parameters as the C ABI takes them: tagged
// TsValues whose text and bytes sit at offsets of one buffer, so neither
// holds a Go pointer.
type values struct {
	vals []C.TsValue
	buf  []byte
}

func (v *values) ptrs() (*C.TsValue, C.size_t, *C.uint8_t, C.size_t) {
	b, n := bptr(v.buf)
	return (*C.TsValue)(unsafe.Pointer(unsafe.SliceData(v.vals))), C.size_t(len(v.vals)), b, n
}

func (v *values) add(kind C.uint8_t, num int64, real float64, b []byte) {
	tv := C.TsValue{kind: kind, num: C.int64_t(num), real: C.double(real)}
	if kind == C.TS_TEXT || kind == C.TS_BLOB {
		tv.off = C.size_t(len(v.buf))
		tv.len = C.size_t(len(b))
		v.buf = append(v.buf, b...)
	}
	v.vals = append(v.vals, tv)
}

// addInt adds any Go integer as TS_INT or TS_UINT; false if x is none.
func (v *values) addInt(x any) bool {
	switch n := x.(type) {
	case int:
		v.add(C.TS_INT, int64(n), 0, nil)
	case int8:
		v.add(C.TS_INT, int64(n), 0, nil)
	case int16:
		v.add(C.TS_INT, int64(n), 0, nil)
	case int32:
		v.add(C.TS_INT, int64(n), 0, nil)
	case int64:
		v.add(C.TS_INT, n, 0, nil)
	case uint:
		v.add(C.TS_UINT, int64(n), 0, nil)
	case uint8:
		v.add(C.TS_UINT, int64(n), 0, nil)
	case uint16:
		v.add(C.TS_UINT, int64(n), 0, nil)
	case uint32:
		v.add(C.TS_UINT, int64(n), 0, nil)
	case uint64:
		v.add(C.TS_UINT, int64(n), 0, nil)
	default:
		return false
	}
	return true
}

// CheckKey tells whether k can be a key: an integer of any Go type, or a
// string. The engine checks its length where it is used.
func CheckKey(k any) error {
	var v values
	return v.addKey(k)
}

func (v *values) addKey(k any) error {
	if s, ok := k.(string); ok {
		v.add(C.TS_TEXT, 0, 0, []byte(s))
		return nil
	}
	if v.addInt(k) {
		return nil
	}
	return Invalid("a key is an integer or a string, like 42 or \"chat-42\"; got %T", k)
}

func keyValues(keys []any) (values, error) {
	var v values
	for _, k := range keys {
		if err := v.addKey(k); err != nil {
			return v, err
		}
	}
	return v, nil
}

// paramValues turns SQL parameters into values: nil, integers, floats,
// bools (0 or 1), strings, []byte, and anything with a driver.Valuer.
func paramValues(args []any) (values, error) {
	var v values
	for i, a := range args {
		if val, ok := a.(driver.Valuer); ok {
			x, err := val.Value()
			if err != nil {
				return v, Invalid("parameter %d: %v", i+1, err)
			}
			a = x
		}
		switch x := a.(type) {
		case nil:
			v.add(C.TS_NULL, 0, 0, nil)
		case bool:
			n := int64(0)
			if x {
				n = 1
			}
			v.add(C.TS_INT, n, 0, nil)
		case float32:
			v.add(C.TS_REAL, 0, float64(x), nil)
		case float64:
			v.add(C.TS_REAL, 0, x, nil)
		case string:
			v.add(C.TS_TEXT, 0, 0, []byte(x))
		case []byte:
			v.add(C.TS_BLOB, 0, 0, x)
		default:
			if !v.addInt(a) {
				return v, Invalid("parameter %d of type %T cannot be bound: pass an integer, float, bool, string, []byte or nil", i+1, a)
			}
		}
	}
	return v, nil
}

// goValue copies a value the library gave, within buf.
func goValue(tv C.TsValue, buf []byte) any {
	switch tv.kind {
	case C.TS_INT:
		return int64(tv.num)
	case C.TS_REAL:
		return float64(tv.real)
	case C.TS_TEXT:
		return string(buf[tv.off : tv.off+tv.len])
	case C.TS_BLOB:
		return append([]byte(nil), buf[tv.off:tv.off+tv.len]...)
	case C.TS_NULL:
		return nil
	default:
		panic(fmt.Sprintf("tinystore: unknown value kind %d", tv.kind))
	}
}

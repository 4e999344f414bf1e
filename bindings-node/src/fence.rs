//! Fences cross as `bigint`, every digit kept (napi6 turns a `u128` into a bigint).

use napi::bindgen_prelude::BigInt;
use napi_derive::napi;
use tinystore::Fence;

use crate::errors::invalid;

/// The fence of `epoch` (high 64 bits) and `count` (low 64 bits), as the
/// engine composes it; for the fence vectors of FENCE-01.
#[napi]
pub fn fence_of(epoch: BigInt, count: BigInt) -> napi::Result<u128> {
    let half = |b: BigInt, what: &str| {
        let (negative, v, lossless) = b.get_u64();
        if negative || !lossless {
            return Err(invalid(format!("a fence's {what} is 0 to 2^64-1")));
        }
        Ok(v)
    };
    Ok(Fence::new(half(epoch, "epoch")?, half(count, "count")?).get())
}

/// The engine's 40-digit text of `fence`, which sorts like the number.
#[napi]
pub fn fence_padded(fence: BigInt) -> napi::Result<String> {
    let (negative, v, lossless) = fence.get_u128();
    if negative || !lossless {
        return Err(invalid("a fence is 0 to 2^128-1"));
    }
    Ok(Fence::from_u128(v).padded())
}

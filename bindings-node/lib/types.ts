/**
 * A duration: text of a number and a unit (`'250ms'`, `'30s'`, `'2m'`,
 * `'1h'`, or several in a row: `'1m30s'`), or a number of milliseconds.
 */
export type Duration = string | number

/**
 * A lock key or a branch key: text of 1 to 1,024 bytes, or an integer (a
 * number or a bigint). An integer is its decimal text, so `7`, `7n` and `'7'`
 * name the same key; `'07'` is another.
 */
export type Key = string | number | bigint

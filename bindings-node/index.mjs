// The ES module entry point: the CommonJS build's exports, so both entry
// points share one copy of every class (instanceof works across them).
import cjs from './dist/index.js'

export const {
  AuthError,
  Branch,
  BusyError,
  Channel,
  ClosedError,
  ConflictError,
  Database,
  InternalError,
  InvalidError,
  IoError,
  Lease,
  LimitError,
  Lock,
  LostError,
  MessageIterator,
  OwnedError,
  Permit,
  ProtocolError,
  Semaphore,
  SqlError,
  Store,
  Subscription,
  TimeoutError,
  TinyStoreError,
  Tx,
  TxBranch,
  connect,
  open,
} = cjs

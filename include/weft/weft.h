/*
 * Weft: a collective communication library with an NCCL-shaped C API.
 *
 * Every function returns a weftResult_t whose values match ncclResult_t. When a call fails,
 * weftGetLastError() returns a readable sentence saying what went wrong and, where a peer is
 * at fault, which rank and host. A call refused before it runs (a bad argument) leaves every
 * buffer as it was; one that fails while running (a peer in another call, a lost peer, a
 * timeout) may have written part of its receive buffer, as in NCCL.
 *
 * This header is C11-compatible; all exported symbols carry the `weft` prefix.
 */
#ifndef WEFT_WEFT_H_
#define WEFT_WEFT_H_

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAJOR 0
#define WEFT_MINOR 1
#define WEFT_PATCH 0
#define WEFT_VERSION_CODE (WEFT_MAJOR * 10000 + WEFT_MINOR * 100 + WEFT_PATCH)

#if defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

/* Result codes: the same values as ncclResult_t, 0 to 7. weftTimeout is Weft's own (NCCL has
 * no such code): a blocking wait passed its deadline (weftConfig_t.timeoutMs, WEFT_TIMEOUT_MS). */
typedef enum {
  weftSuccess = 0,
  weftUnhandledCudaError = 1,
  weftSystemError = 2,
  weftInternalError = 3,
  weftInvalidArgument = 4,
  weftInvalidUsage = 5,
  weftRemoteError = 6,
  weftInProgress = 7,
  weftTimeout = 8,
  weftNumResults = 9
} weftResult_t;

/* Element types: the same values as ncclDataType_t. */
typedef enum {
  weftInt8 = 0,
  weftChar = 0,
  weftUint8 = 1,
  weftInt32 = 2,
  weftInt = 2,
  weftUint32 = 3,
  weftInt64 = 4,
  weftUint64 = 5,
  weftFloat16 = 6,
  weftHalf = 6,
  weftFloat32 = 7,
  weftFloat = 7,
  weftFloat64 = 8,
  weftDouble = 8,
  weftBfloat16 = 9,
  weftFloat8e4m3 = 10,
  weftFloat8e5m2 = 11,
  weftNumTypes = 12
} weftDataType_t;

/* Reduction operators: the same values as ncclRedOp_t. Avg divides the sum by the number of
 * ranks (truncating for integer types, as NCCL does). For half, bfloat16 and fp8 on host
 * buffers each input is divided first, as NCCL does, so that the sum does not saturate or overflow
 * where the average fits, but for the rounding of the partial sums at the very top of the range
 * (half's 65504 averaged over 3 ranks rounds up to inf); on device buffers the kernels sum in
 * float and divide once. Integer Avg divides the wrapped sum, as NCCL's does. Float and
 * double sum first and divide once, rounding once, where NCCL scales each input by 1/nranks:
 * the last bit can differ from NCCL's, and a sum beyond the type's range is inf where NCCL's
 * average is finite.
 * Max and Min on floating types propagate NaN (a NaN in any input gives NaN, as torch.max
 * does); NCCL's use fmax/fmin and return the other operand. */
typedef enum {
  weftSum = 0,
  weftProd = 1,
  weftMax = 2,
  weftMin = 3,
  weftAvg = 4,
  weftNumOps = 5,
  /* Operators from weftRedOpCreatePreMulSum take values from weftNumOps up. */
  weftMaxRedOp = 0x7fffffff
} weftRedOp_t;

/* Where a PreMulSum scalar lives: weftScalarHostImmediate copies the value when the operator
 * is created; weftScalarDevice reads it through the pointer each time a collective runs (any
 * memory the caller keeps valid, device memory included; with device buffers it is read in
 * stream order). */
typedef enum { weftScalarDevice = 0, weftScalarHostImmediate = 1 } weftScalarResidence_t;

/* Opaque identifier of a communicator clique: the root's address and a random secret. Made by
 * weftGetUniqueId on one process and handed to every rank out of band. */
#define WEFT_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weftUniqueId;

typedef struct weftComm* weftComm_t;

/* A stream. With host buffers: NULL means "complete before returning"; a host stream from
 * weftStreamCreate means "queue it and return at once" (the buffers must stay valid until the
 * stream has finished it). With device buffers (in a Weft built with CUDA or HIP), it is a
 * cudaStream_t / hipStream_t (NULL: the default stream): the call returns at once and completes
 * in that stream's order, like NCCL; failures show in weftCommGetAsyncError. Ranks that one
 * thread drives (weftCommInitAll, or several communicators) need a stream each. */
typedef void* weftStream_t;

/* Communicator configuration. Always start from WEFT_CONFIG_INITIALIZER, then set fields. */
#define WEFT_CONFIG_UNDEF_INT INT32_MIN
typedef struct {
  size_t size;          /* sizeof(weftConfig_t), set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  int blocking;         /* 1 (default): init blocks; 0: init returns weftInProgress, poll
                           weftCommGetAsyncError until it is no longer weftInProgress */
  int timeoutMs;        /* deadline for every blocking wait; default WEFT_TIMEOUT_MS or 300000 */
} weftConfig_t;

#define WEFT_CONFIG_MAGIC 0x77656674u /* "weft" */
#define WEFT_CONFIG_INITIALIZER                                                    \
  {                                                                                \
    sizeof(weftConfig_t), WEFT_CONFIG_MAGIC, WEFT_VERSION_CODE,                    \
        WEFT_CONFIG_UNDEF_INT, WEFT_CONFIG_UNDEF_INT                               \
  }

/* Version as WEFT_VERSION_CODE. */
WEFT_API weftResult_t weftGetVersion(int* version);

/* Creates a unique id on the calling process, which then hosts the rendezvous for it until
 * every rank has joined (or the timeout passes). */
WEFT_API weftResult_t weftGetUniqueId(weftUniqueId* uniqueId);

/* Creates this rank's communicator; collective over all nranks ranks holding the same id. The
 * communicator is bound to the calling thread's current GPU, if any: its device buffers must be
 * there (several ranks may share a GPU). */
WEFT_API weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId commId,
                                       int rank);
WEFT_API weftResult_t weftCommInitRankConfig(weftComm_t* comm, int nranks, weftUniqueId commId,
                                             int rank, weftConfig_t* config);

/* Creates ndev communicators of one clique in this process, ranks 0..ndev-1 (one thread each
 * during init), rank i bound to GPU devlist[i]; with devlist NULL, all to the current GPU (if
 * any). Host-memory communicators do not use it. */
WEFT_API weftResult_t weftCommInitAll(weftComm_t* comms, int ndev, const int* devlist);

/* Splits comm into disjoint communicators, one per color; collective over comm. Ranks order by
 * key, then by their rank in comm. A rank passing WEFT_SPLIT_NOCOLOR joins none and gets NULL.
 * config NULL: the new communicator inherits comm's timeout (blocking init). A rank whose
 * arguments are rejected (a negative color, a bad config, inside a group) still takes part, so
 * every rank fails at once (weftInvalidUsage on the others) and comm stays usable. */
#define WEFT_SPLIT_NOCOLOR -1
WEFT_API weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t* newcomm,
                                    weftConfig_t* config);

/* Creates this rank's communicator from the launcher's environment: torchrun's (MASTER_ADDR,
 * MASTER_PORT, RANK, WORLD_SIZE), Open MPI's (OMPI_COMM_WORLD_*), Slurm's (SLURM_PROCID,
 * SLURM_NTASKS, ...), with WEFT_COMM_ID=host:port naming the root's listening address. */
WEFT_API weftResult_t weftCommInitFromEnv(weftComm_t* comm);

/* Lets every operation issued on comm so far finish (host and device streams, each by its
 * deadline), and, where GPUs share buffers through CUDA IPC, meets the peers so that none still
 * reads this rank's; afterwards comm takes no calls but weftCommDestroy (and the queries). A
 * blocking communicator returns when that is done: weftSuccess, or the error of an operation
 * that failed. A non-blocking one (config.blocking = 0) returns weftInProgress at once; poll
 * weftCommGetAsyncError until it is no longer weftInProgress. As in NCCL, optional: destroy
 * does the same when it was not called. */
WEFT_API weftResult_t weftCommFinalize(weftComm_t comm);

/* Waits for in-flight work (with the deadline), then frees the communicator. */
WEFT_API weftResult_t weftCommDestroy(weftComm_t comm);

/* Stops everything at once, wakes every waiter, frees the communicator. Safe after a failure. */
WEFT_API weftResult_t weftCommAbort(weftComm_t comm);

/* weftSuccess, weftInProgress while a non-blocking init (or finalize) runs, or the error that
 * ended it; after init, the first error of an operation that ran on a host stream. */
WEFT_API weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError);

WEFT_API weftResult_t weftCommCount(const weftComm_t comm, int* count);
WEFT_API weftResult_t weftCommUserRank(const weftComm_t comm, int* rank);
/* The GPU comm is bound to (the device current at its init, as NCCL's ncclCommCuDevice), or -1
 * where it has none: no GPU was visible at init (to a CUDA build, none is until the process
 * has used the CUDA runtime), or Weft was built without CUDA or HIP. */
WEFT_API weftResult_t weftCommCuDevice(const weftComm_t comm, int* device);

/* A fixed sentence for each result code. */
WEFT_API const char* weftGetErrorString(weftResult_t result);

/* The last error's full text: the communicator's when comm is not NULL, otherwise the calling
 * thread's. Valid until the calling thread's next failing call or next weftGetLastError. */
WEFT_API const char* weftGetLastError(weftComm_t comm);

/* Host streams. Collectives issued on a stream run one after another, in issue order, on the
 * communicator's progress thread while the caller goes on computing; each waits for the one
 * before it on the same stream, even on another communicator. */
WEFT_API weftResult_t weftStreamCreate(weftStream_t* stream);
/* Work already issued on the stream still runs. */
WEFT_API weftResult_t weftStreamDestroy(weftStream_t stream);
/* Waits for everything issued on the stream; returns the first error any of it met (a stream
 * that met one keeps returning it: make a new stream). NULL has nothing to wait for. */
WEFT_API weftResult_t weftStreamSynchronize(weftStream_t stream);
/* weftSuccess when all issued work is done, weftInProgress while some runs, or the first error,
 * as weftStreamSynchronize. NULL: weftSuccess. */
WEFT_API weftResult_t weftStreamQuery(weftStream_t stream);

/* Collectives. Buffers are host memory; counts are elements. Every call is collective over the
 * communicator's ranks, which must issue the same collectives in the same order. "In place"
 * is NCCL's: the layouts noted below let sendbuff and recvbuff share memory; any other overlap
 * is an error. Buffers used only at the root may be NULL elsewhere. */

/* Reduces count elements of sendbuff across all ranks into every rank's recvbuff. In place when
 * sendbuff == recvbuff. */
WEFT_API weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                    weftStream_t stream);

/* Copies count elements of root's sendbuff to every rank's recvbuff (sendbuff is read at the
 * root only). In place when sendbuff == recvbuff. */
WEFT_API weftResult_t weftBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    weftDataType_t datatype, int root, weftComm_t comm,
                                    weftStream_t stream);
/* In-place broadcast of buff. */
WEFT_API weftResult_t weftBcast(void* buff, size_t count, weftDataType_t datatype, int root,
                                weftComm_t comm, weftStream_t stream);

/* Reduces count elements of every rank's sendbuff into root's recvbuff (written at the root
 * only). In place when sendbuff == recvbuff. */
WEFT_API weftResult_t weftReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 weftDataType_t datatype, weftRedOp_t op, int root,
                                 weftComm_t comm, weftStream_t stream);

/* Every rank's sendcount elements land in every rank's recvbuff at offset rank * sendcount.
 * In place when sendbuff == recvbuff + rank * sendcount. */
WEFT_API weftResult_t weftAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    weftDataType_t datatype, weftComm_t comm, weftStream_t stream);

/* Reduces nranks * recvcount elements across ranks; rank r receives block r (recvcount
 * elements). In place when recvbuff == sendbuff + rank * recvcount. */
WEFT_API weftResult_t weftReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                        weftStream_t stream);

/* Block j (count elements) of rank i's sendbuff lands as block i of rank j's recvbuff. In place
 * when sendbuff == recvbuff. */
WEFT_API weftResult_t weftAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   weftDataType_t datatype, weftComm_t comm, weftStream_t stream);

/* Every rank's sendcount elements land in root's recvbuff at offset rank * sendcount. In place
 * when, at the root, sendbuff == recvbuff + root * sendcount. */
WEFT_API weftResult_t weftGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 weftDataType_t datatype, int root, weftComm_t comm,
                                 weftStream_t stream);

/* Block r (recvcount elements) of root's sendbuff lands in rank r's recvbuff. In place when,
 * at the root, recvbuff == sendbuff + root * recvcount. */
WEFT_API weftResult_t weftScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  weftDataType_t datatype, int root, weftComm_t comm,
                                  weftStream_t stream);

/* Point-to-point: the n-th weftSend from rank a to rank b matches the n-th weftRecv on b from a,
 * with the same count and type. A rank may send to itself inside a group that also receives
 * from itself. Outside a group each call returns when its transfer is done, so two ranks that
 * both send first must group their sends and receives. */
WEFT_API weftResult_t weftSend(const void* sendbuff, size_t count, weftDataType_t datatype,
                               int peer, weftComm_t comm, weftStream_t stream);
WEFT_API weftResult_t weftRecv(void* recvbuff, size_t count, weftDataType_t datatype, int peer,
                               weftComm_t comm, weftStream_t stream);

/* Returns (or, on a host stream, completes) once every rank has entered the barrier. */
WEFT_API weftResult_t weftBarrier(weftComm_t comm, weftStream_t stream);

/* Groups: calls between weftGroupStart and weftGroupEnd are checked when made and issued
 * together at weftGroupEnd, one merged operation per communicator, so paired sends and
 * receives inside a group never deadlock whatever their order. Groups nest; the outermost
 * weftGroupEnd issues. All calls of a group on one communicator must use the same stream,
 * and no call may write memory another call of the group (on any communicator) reads or
 * writes: they run side by side, and NCCL leaves it undefined. weftGroupEnd refuses such a
 * group with weftInvalidArgument on the ranks where it happens (which buffers a rooted call
 * uses depends on the rank); the others' calls then end in their timeout.
 * A call that fails inside a group fails the group: weftGroupEnd returns its error and issues
 * nothing. Inits inside a group run side by side: weftGroupEnd waits for blocking ones, and
 * returns weftInProgress while a non-blocking one still runs (poll weftCommGetAsyncError). */
WEFT_API weftResult_t weftGroupStart(void);
WEFT_API weftResult_t weftGroupEnd(void);

/* What weftGroupSimulateEnd fills in. Always start from WEFT_SIM_INFO_INITIALIZER. */
typedef struct {
  size_t size;          /* sizeof(weftSimInfo_t), set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  float estimatedTime;  /* microseconds; NAN until a simulation fills it */
} weftSimInfo_t;

#define WEFT_SIM_INFO_MAGIC 0x77736966u /* "wsif" */
#define WEFT_SIM_INFO_INITIALIZER \
  { sizeof(weftSimInfo_t), WEFT_SIM_INFO_MAGIC, WEFT_VERSION_CODE, NAN }

/* Ends a group as weftGroupEnd does (its checks before anything is issued, inits waited for), but
 * issues none of its calls: no buffer is read or written, no peer is waited for, and every
 * communicator stays as it was. As NCCL's ncclGroupSimulateEnd, it fills
 * simInfo->estimatedTime with the tuner's predicted time of the group in microseconds: on each
 * communicator the calls one after another, each as the algorithm the tuner picks for it; the
 * communicators side by side (the slowest one's). The model prices host memory over the
 * communicator's links (a GPU's staging and IPC are not in it). An inner (nested) call only
 * closes its level and leaves simInfo alone. */
WEFT_API weftResult_t weftGroupSimulateEnd(weftSimInfo_t* simInfo);

/* A reduction operator that multiplies each rank's input by *scalar (of datatype) before
 * summing, for use on comm with collectives of that datatype. */
WEFT_API weftResult_t weftRedOpCreatePreMulSum(weftRedOp_t* op, void* scalar, weftDataType_t datatype,
                                               weftScalarResidence_t residence, weftComm_t comm);
WEFT_API weftResult_t weftRedOpDestroy(weftRedOp_t op, weftComm_t comm);

/* Host memory that the ranks of one host can read from each other directly (Weft's host
 * counterpart of ncclMemAlloc; size > 0, *ptr page-aligned; pages come on first touch, as
 * malloc's do). An all-reduce of 256 KiB or more on a communicator whose ranks are all on one
 * host and talk through shared memory, whose send and receive buffers lie within such
 * allocations on every rank, reads the peers' inputs where they lie instead of copying them
 * through shared-memory segments (unless WEFT_ALGO forces an all-reduce algorithm, or the
 * operator is a PreMulSum or an average of half, bfloat16 or fp8 values, which are staged).
 * Other calls take such buffers as any other host memory. Peers map an allocation through /proc/<pid>/fd, which needs
 * the access process_vm_readv needs (the same user, ptrace read permission); where it is
 * refused, the call takes the copying path. weftHostMemFree takes the pointer weftHostMemAlloc
 * returned; a peer that mapped the memory keeps its pages until that peer's communicator goes.
 * A child made by fork maps each allocation privately at the same address: what the child writes
 * stays in the child, and no peer reads it directly; unlike malloc's copy-on-write memory, a page
 * the child has not written shows the allocation as it is now, the parent's later writes
 * included. */
WEFT_API weftResult_t weftHostMemAlloc(void** ptr, size_t size);
WEFT_API weftResult_t weftHostMemFree(void* ptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_WEFT_H_ */

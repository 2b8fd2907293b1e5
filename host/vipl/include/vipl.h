/* VIPL 1.0: the VI Provider Library of the Virtual Interface Architecture
 * (VI Architecture Specification 1.0; Intel's VI Developer's Guide), on
 * ulnic. The names, types, constants, descriptor layouts and prototypes are
 * the spec's, so programs written against it compile unchanged, as C or as
 * C++. The library behind it is libulnic's vipl layer.
 *
 * What the spec leaves to each provider, ulnic fixes as follows:
 *
 *   device names    "nic0", "nic1", ...: one NIC per node of the cluster
 *                   ($ULNIC_CLUSTER, else "default"), so VipOpenNic("nic3")
 *                   opens node 3's NIC.
 *   host addresses  the node number: NicAddressLen is 2 and the two bytes
 *                   are the node id, little-endian.
 *   name service    built in: "node<k>" and "nic<k>" resolve to node k.
 *   timeouts        milliseconds; VIP_INFINITE waits forever.
 *
 * A connection, as the spec has it:
 *
 *   VipOpenNic("nic0", &nic);  VipCreatePtag(nic, &ptag);
 *   VipRegisterMem(nic, buf, len, &memattrs, &mh);     // memattrs.Ptag = ptag
 *   VipCreateVi(nic, &viattrs, NULL, recv_cq, &vi);    // viattrs.Ptag = ptag
 *   VipPostRecv(vi, rdesc, mh);                        // before connecting
 *   server: VipConnectWait(nic, local, VIP_INFINITE, remote, &rattrs, &conn);
 *           VipConnectAccept(conn, vi);
 *   client: VipNSGetHostByName(nic, name, remote, 0);  // then the discriminator
 *           VipConnectRequest(vi, local, remote, VIP_INFINITE, &rattrs);
 *   VipPostSend(vi, sdesc, mh);  VipSendWait(vi, VIP_INFINITE, &done);
 *   VipDisconnect(vi);  VipDestroyVi(vi);  ...  VipCloseNic(nic);
 *
 * Programs build descriptors in place, in registered memory aligned to
 * VIP_DESCRIPTOR_ALIGNMENT, so their layout below is the spec's, byte for
 * byte, on every ABI.
 */
#ifndef ULNIC_VIPL_H
#define ULNIC_VIPL_H

#include <stddef.h>
#include <stdint.h>

/* The spec's prototypes mark parameters IN / OUT; programs copy them. */
#ifndef IN
#define IN
#endif
#ifndef OUT
#define OUT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Basic types ---------------------------------------------------------
 * Fixed-width ones are fixed on every ABI. VIP_ULONG stays `unsigned long`
 * as in the published vipl.h files (Intel's, Giganet's), so `unsigned long`
 * variables and %lu / %ld formats in existing programs keep working: it is
 * 64 bits on LP64 Linux. */
typedef uint8_t VIP_UINT8;
typedef uint16_t VIP_UINT16;
typedef uint32_t VIP_UINT32;
typedef uint64_t VIP_UINT64;

typedef char VIP_CHAR;
typedef unsigned char VIP_UCHAR;
typedef short VIP_SHORT;
typedef unsigned short VIP_USHORT;
typedef long VIP_LONG;
typedef unsigned long VIP_ULONG;

typedef int VIP_BOOLEAN;
#define VIP_TRUE 1
#define VIP_FALSE 0

typedef void *VIP_PVOID;
typedef void *VIP_EVENT_HANDLE;
typedef VIP_PVOID VIP_QOS; /* the spec defines no QoS contents */

/* ---- Handles: opaque pointers, except memory handles, which go into
 * descriptors and so are plain 32-bit numbers. */
typedef VIP_PVOID VIP_NIC_HANDLE;
typedef VIP_PVOID VIP_VI_HANDLE;
typedef VIP_PVOID VIP_CQ_HANDLE;
typedef VIP_PVOID VIP_PROTECTION_HANDLE;
typedef VIP_PVOID VIP_CONN_HANDLE;
typedef VIP_UINT32 VIP_MEM_HANDLE;

/* Windows headers give VIPL its INFINITE; Linux has none. Timeouts are in
 * milliseconds; on ulnic any timeout of at least this value waits forever
 * (so (VIP_ULONG)-1 does too). */
#define VIP_INFINITE 0xFFFFFFFF

/* ---- Return codes. VIP_SUCCESS .. VIP_NO_MATCH are the spec's, in its
 * order; Giganet's cLAN vipl.h appends VIP_NOT_REACHABLE and
 * VIP_ERROR_NOT_SUPPORTED, and programs written for it name them. */
typedef enum {
  VIP_SUCCESS = 0,
  VIP_NOT_DONE = 1,
  VIP_INVALID_PARAMETER = 2,
  VIP_ERROR_RESOURCE = 3,
  VIP_TIMEOUT = 4,
  VIP_REJECT = 5,
  VIP_INVALID_RELIABILITY_LEVEL = 6,
  VIP_INVALID_MTU = 7,
  VIP_INVALID_QOS = 8,
  VIP_INVALID_PTAG = 9,
  VIP_INVALID_RDMAREAD = 10,
  VIP_DESCRIPTOR_ERROR = 11,
  VIP_INVALID_STATE = 12,
  VIP_ERROR_NAMESERVICE = 13,
  VIP_NO_MATCH = 14,
  VIP_NOT_REACHABLE = 15,
  VIP_ERROR_NOT_SUPPORTED = 16
} VIP_RETURN;
/* Programs test for the two extensions with #ifdef (as glibc does for its
 * enumerators). */
#define VIP_NOT_REACHABLE VIP_NOT_REACHABLE
#define VIP_ERROR_NOT_SUPPORTED VIP_ERROR_NOT_SUPPORTED

/* ---- Reliability levels: one per VI (VIP_VI_ATTRIBUTES), a bit set of
 * those supported in VIP_NIC_ATTRIBUTES. */
typedef VIP_UINT16 VIP_RELIABILITY_LEVEL;
#define VIP_SERVICE_UNRELIABLE 0x01
#define VIP_SERVICE_RELIABLE_DELIVERY 0x02
#define VIP_SERVICE_RELIABLE_RECEPTION 0x04

/* ---- Network addresses: variable length. HostAddress holds HostAddressLen
 * bytes of host address, then DiscriminatorLen bytes of discriminator; a
 * connection request matches a waiting VipConnectWait on the discriminator.
 * Allocate sizeof(VIP_NET_ADDRESS) + NicAddressLen + discriminator bytes.
 * On ulnic the host address is the 2-byte little-endian node id. */
typedef struct _VIP_NET_ADDRESS {
  VIP_UINT16 HostAddressLen;
  VIP_UINT16 DiscriminatorLen;
  VIP_UINT8 HostAddress[1];
} VIP_NET_ADDRESS;

/* ---- NIC attributes (VipQueryNic). On ulnic Name is "nic<k>",
 * NicAddressLen is 2 and LocalNicAddress points at the node id. */
typedef struct _VIP_NIC_ATTRIBUTES {
  VIP_CHAR Name[64];
  VIP_ULONG HardwareVersion;
  VIP_ULONG ProviderVersion;
  VIP_UINT16 NicAddressLen;
  const VIP_UINT8 *LocalNicAddress;
  VIP_BOOLEAN ThreadSafe;
  VIP_UINT16 MaxDiscriminatorLen;
  VIP_ULONG MaxRegisterBytes;
  VIP_ULONG MaxRegisterRegions;
  VIP_ULONG MaxRegisterBlockBytes;
  VIP_ULONG MaxVI;
  VIP_ULONG MaxDescriptorsPerQueue;
  VIP_ULONG MaxSegmentsPerDesc;
  VIP_ULONG MaxCQ;
  VIP_ULONG MaxCQEntries;
  VIP_ULONG MaxTransferSize;
  VIP_ULONG NativeMTU;
  VIP_ULONG MaxPtags;
  VIP_RELIABILITY_LEVEL ReliabilityLevelSupport;
  VIP_RELIABILITY_LEVEL RDMAReadSupport;
} VIP_NIC_ATTRIBUTES;

/* ---- Memory region and VI attributes. A VI may touch only memory
 * registered under its own protection tag. */
typedef struct _VIP_MEM_ATTRIBUTES {
  VIP_PROTECTION_HANDLE Ptag;
  VIP_BOOLEAN EnableRdmaWrite;
  VIP_BOOLEAN EnableRdmaRead;
} VIP_MEM_ATTRIBUTES;

typedef struct _VIP_VI_ATTRIBUTES {
  VIP_RELIABILITY_LEVEL ReliabilityLevel;
  VIP_ULONG MaxTransferSize;
  VIP_QOS QoS;
  VIP_PROTECTION_HANDLE Ptag;
  VIP_BOOLEAN EnableRdmaWrite;
  VIP_BOOLEAN EnableRdmaRead;
} VIP_VI_ATTRIBUTES;

typedef enum {
  VIP_STATE_IDLE = 0,
  VIP_STATE_CONNECTED = 1,
  VIP_STATE_CONNECT_PENDING = 2,
  VIP_STATE_ERROR = 3
} VIP_VI_STATE;

/* ---- Descriptors --------------------------------------------------------
 * One control segment (32 bytes), then SegCount 16-byte segments: for RDMA
 * the first is the remote address segment, the rest are local data
 * segments. VIP_DESCRIPTOR names the first two; more may follow in memory.
 * Every address field is 64 bits wide whatever the host's pointer size. */
#define VIP_DESCRIPTOR_ALIGNMENT 64

typedef union {
  VIP_UINT64 AddressBits;
  VIP_PVOID Address;
} VIP_PVOID64;

typedef struct {
  VIP_PVOID64 Next;           /* provider's: links posted descriptors */
  VIP_MEM_HANDLE NextHandle;  /* provider's: memory handle of Next */
  VIP_UINT16 SegCount;        /* segments after this one */
  VIP_UINT16 Control;         /* VIP_CONTROL_* */
  VIP_UINT32 Reserved;
  VIP_UINT32 ImmediateData;   /* with VIP_CONTROL_IMMEDIATE / VIP_STATUS_IMMEDIATE */
  VIP_UINT32 Length;          /* total bytes: poster's for a send, provider's on receive */
  VIP_UINT32 Status;          /* VIP_STATUS_*, set on completion */
} VIP_CONTROL_SEGMENT;

/* Control: written by the poster. */
#define VIP_CONTROL_OP_SENDRECV 0x0
#define VIP_CONTROL_OP_RDMAWRITE 0x1
#define VIP_CONTROL_OP_RDMAREAD 0x2
#define VIP_CONTROL_OP_RESERVED 0x3
#define VIP_CONTROL_OP_MASK 0x3
#define VIP_CONTROL_IMMEDIATE 0x4
#define VIP_CONTROL_QFENCE 0x8
#define VIP_CONTROL_RESERVED 0xFFF0

/* Status: written by the provider when the descriptor completes. */
#define VIP_STATUS_DONE 0x1
#define VIP_STATUS_FORMAT_ERROR 0x2
#define VIP_STATUS_PROTECTION_ERROR 0x4
#define VIP_STATUS_LENGTH_ERROR 0x8
#define VIP_STATUS_PARTIAL_ERROR 0x10
#define VIP_STATUS_DESC_FLUSHED_ERROR 0x20
#define VIP_STATUS_TRANSPORT_ERROR 0x40
#define VIP_STATUS_RDMA_PROT_ERROR 0x80
#define VIP_STATUS_REMOTE_DESC_ERROR 0x100
#define VIP_STATUS_ERROR_MASK 0x1FE
#define VIP_STATUS_OP_SEND 0x0
#define VIP_STATUS_OP_RECEIVE 0x10000
#define VIP_STATUS_OP_RDMA_WRITE 0x20000
#define VIP_STATUS_OP_REMOTE_RDMA_WRITE 0x30000
#define VIP_STATUS_OP_RDMA_READ 0x40000
#define VIP_STATUS_OP_MASK 0x70000
#define VIP_STATUS_IMMEDIATE 0x80000
#define VIP_STATUS_RESERVED 0xFFF0FE00

typedef struct {
  VIP_PVOID64 Data;        /* remote virtual address */
  VIP_MEM_HANDLE Handle;   /* remote memory handle */
  VIP_UINT32 Reserved;
} VIP_ADDRESS_SEGMENT;

typedef struct {
  VIP_PVOID64 Data;        /* local virtual address */
  VIP_MEM_HANDLE Handle;   /* its memory handle */
  VIP_UINT32 Length;       /* bytes */
} VIP_DATA_SEGMENT;

typedef union {
  VIP_ADDRESS_SEGMENT Remote;
  VIP_DATA_SEGMENT Local;
} VIP_DESCRIPTOR_SEGMENT;

typedef struct _VIP_DESCRIPTOR {
  VIP_CONTROL_SEGMENT CS;
  VIP_DESCRIPTOR_SEGMENT DS[2];
} VIP_DESCRIPTOR;

/* ---- Asynchronous errors, reported to the VipErrorCallback handler. */
typedef enum _VIP_RESOURCE_CODE {
  VIP_RESOURCE_NIC = 0,
  VIP_RESOURCE_VI = 1,
  VIP_RESOURCE_CQ = 2,
  VIP_RESOURCE_DESCRIPTOR = 3
} VIP_RESOURCE_CODE;

typedef enum _VIP_ERROR_CODE {
  VIP_ERROR_POST_DESC = 0,
  VIP_ERROR_CONN_LOST = 1,
  VIP_ERROR_RECVQ_EMPTY = 2,
  VIP_ERROR_VI_OVERRUN = 3,
  VIP_ERROR_RDMAW_PROT = 4,
  VIP_ERROR_RDMAW_DATA = 5,
  VIP_ERROR_RDMAW_ABORT = 6,
  VIP_ERROR_RDMAR_PROT = 7,
  VIP_ERROR_COMP_PROT = 8,
  VIP_ERROR_RDMA_TRANSPORT = 9,
  VIP_ERROR_CATASTROPHIC = 10
} VIP_ERROR_CODE;

typedef struct _VIP_ERROR_DESCRIPTOR {
  VIP_NIC_HANDLE NicHandle;
  VIP_VI_HANDLE ViHandle;          /* when ResourceCode names a VI or descriptor */
  VIP_CQ_HANDLE CQHandle;          /* when it names a CQ */
  VIP_DESCRIPTOR *DescriptorPtr;   /* when it names a descriptor */
  VIP_ULONG OpCode;                /* on ulnic: that descriptor's VIP_CONTROL_OP_* */
  VIP_RESOURCE_CODE ResourceCode;
  VIP_ERROR_CODE ErrorCode;
} VIP_ERROR_DESCRIPTOR;

/* ---- System management (VipQuerySystemManagementInfo). */
#define VIP_SMI_AUTODISCOVERY ((VIP_ULONG)1)

typedef struct {
  VIP_ULONG NumberOfHops;
  VIP_NET_ADDRESS **ADAddrArray;  /* NumAdAddrs pointers to addresses */
  VIP_ULONG NumAdAddrs;
} VIP_AUTODISCOVERY_LIST;

/* ---- Callback types for VipSendNotify / VipRecvNotify, VipCQNotify and
 * VipErrorCallback (named as in cLAN's vipl.h; the prototypes below spell
 * the same types out, as the spec does). */
typedef void (*VIP_VI_CALLBACK)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle, VIP_VI_HANDLE ViHandle,
                                VIP_DESCRIPTOR *Descriptor);
typedef void (*VIP_CQ_CALLBACK)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle, VIP_VI_HANDLE ViHandle,
                                VIP_BOOLEAN RecvQueue);
typedef void (*VIP_ERROR_HANDLER)(VIP_PVOID Context, VIP_ERROR_DESCRIPTOR *ErrorDesc);

/* ---- NIC: open by device name ("nic<k>": node k's NIC), query, close. */
VIP_RETURN VipOpenNic(IN const VIP_CHAR *DeviceName, OUT VIP_NIC_HANDLE *NicHandle);
VIP_RETURN VipCloseNic(IN VIP_NIC_HANDLE NicHandle);
VIP_RETURN VipQueryNic(IN VIP_NIC_HANDLE NicHandle, OUT VIP_NIC_ATTRIBUTES *Attributes);

/* ---- Memory registration: the NIC may read and write registered memory
 * (as its attributes allow) until it is deregistered. */
VIP_RETURN VipRegisterMem(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID VirtualAddress, IN VIP_ULONG Length,
                          IN VIP_MEM_ATTRIBUTES *MemAttributes, OUT VIP_MEM_HANDLE *MemHandle);
VIP_RETURN VipDeregisterMem(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID VirtualAddress,
                            IN VIP_MEM_HANDLE MemHandle);
VIP_RETURN VipQueryMem(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID Address, IN VIP_MEM_HANDLE MemHandle,
                       OUT VIP_MEM_ATTRIBUTES *MemAttributes);
VIP_RETURN VipSetMemAttributes(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID Address, IN VIP_MEM_HANDLE MemHandle,
                               IN VIP_MEM_ATTRIBUTES *MemAttributes);

/* ---- Protection tags. */
VIP_RETURN VipCreatePtag(IN VIP_NIC_HANDLE NicHandle, OUT VIP_PROTECTION_HANDLE *ProtectionTag);
VIP_RETURN VipDestroyPtag(IN VIP_NIC_HANDLE NicHandle, IN VIP_PROTECTION_HANDLE ProtectionTag);

/* ---- VIs. A CQ handle of NULL means that work queue completes on the VI
 * only (VipSendDone/Wait, VipRecvDone/Wait). */
VIP_RETURN VipCreateVi(IN VIP_NIC_HANDLE NicHandle, IN VIP_VI_ATTRIBUTES *ViAttributes,
                       IN VIP_CQ_HANDLE SendCQHandle, IN VIP_CQ_HANDLE RecvCQHandle, OUT VIP_VI_HANDLE *ViHandle);
VIP_RETURN VipDestroyVi(IN VIP_VI_HANDLE ViHandle);
VIP_RETURN VipQueryVi(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_STATE *State, OUT VIP_VI_ATTRIBUTES *Attributes,
                      OUT VIP_BOOLEAN *SendQueueEmpty, OUT VIP_BOOLEAN *RecvQueueEmpty);
VIP_RETURN VipSetViAttributes(IN VIP_VI_HANDLE ViHandle, IN VIP_VI_ATTRIBUTES *Attributes);

/* ---- Data transfer: post a descriptor (MemoryHandle is the handle of the
 * memory the descriptor itself lies in); reap completions in order with
 * Done (poll: VIP_NOT_DONE if none), Wait (block up to Timeout ms) or Notify
 * (one callback for the next completion). */
VIP_RETURN VipPostSend(IN VIP_VI_HANDLE ViHandle, IN VIP_DESCRIPTOR *DescriptorPtr, IN VIP_MEM_HANDLE MemoryHandle);
VIP_RETURN VipSendDone(IN VIP_VI_HANDLE ViHandle, OUT VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipSendWait(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Timeout, OUT VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipSendNotify(IN VIP_VI_HANDLE ViHandle, IN VIP_PVOID Context,
                         IN void (*Handler)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle, VIP_VI_HANDLE ViHandle,
                                            VIP_DESCRIPTOR *Descriptor));
VIP_RETURN VipPostRecv(IN VIP_VI_HANDLE ViHandle, IN VIP_DESCRIPTOR *DescriptorPtr, IN VIP_MEM_HANDLE MemoryHandle);
VIP_RETURN VipRecvDone(IN VIP_VI_HANDLE ViHandle, OUT VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipRecvWait(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Timeout, OUT VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipRecvNotify(IN VIP_VI_HANDLE ViHandle, IN VIP_PVOID Context,
                         IN void (*Handler)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle, VIP_VI_HANDLE ViHandle,
                                            VIP_DESCRIPTOR *Descriptor));

/* ---- Client/server connections. The server waits on a local address
 * (its node plus a discriminator) and accepts or rejects; the client
 * requests with the server's address. */
VIP_RETURN VipConnectWait(IN VIP_NIC_HANDLE NicHandle, IN VIP_NET_ADDRESS *LocalAddr, IN VIP_ULONG Timeout,
                          OUT VIP_NET_ADDRESS *RemoteAddr, OUT VIP_VI_ATTRIBUTES *RemoteViAttributes,
                          OUT VIP_CONN_HANDLE *ConnHandle);
VIP_RETURN VipConnectAccept(IN VIP_CONN_HANDLE ConnHandle, IN VIP_VI_HANDLE ViHandle);
VIP_RETURN VipConnectReject(IN VIP_CONN_HANDLE ConnHandle);
VIP_RETURN VipConnectRequest(IN VIP_VI_HANDLE ViHandle, IN VIP_NET_ADDRESS *LocalAddr,
                             IN VIP_NET_ADDRESS *RemoteAddr, IN VIP_ULONG Timeout,
                             OUT VIP_VI_ATTRIBUTES *RemoteViAttributes);
VIP_RETURN VipDisconnect(IN VIP_VI_HANDLE ViHandle);

/* ---- Peer-to-peer connections: both sides request; Done polls, Wait
 * blocks until the pair is matched. */
VIP_RETURN VipConnectPeerRequest(IN VIP_VI_HANDLE ViHandle, IN VIP_NET_ADDRESS *LocalAddr,
                                 IN VIP_NET_ADDRESS *RemoteAddr, IN VIP_ULONG Timeout);
VIP_RETURN VipConnectPeerDone(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_ATTRIBUTES *RemoteViAttributes);
VIP_RETURN VipConnectPeerWait(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_ATTRIBUTES *RemoteViAttributes);

/* ---- Completion queues: a CQ entry says which VI and which of its queues
 * completed; the descriptor is then taken with VipSendDone / VipRecvDone. */
VIP_RETURN VipCreateCQ(IN VIP_NIC_HANDLE NicHandle, IN VIP_ULONG EntryCount, OUT VIP_CQ_HANDLE *CQHandle);
VIP_RETURN VipDestroyCQ(IN VIP_CQ_HANDLE CQHandle);
VIP_RETURN VipResizeCQ(IN VIP_CQ_HANDLE CQHandle, IN VIP_ULONG EntryCount);
VIP_RETURN VipCQDone(IN VIP_CQ_HANDLE CQHandle, OUT VIP_VI_HANDLE *ViHandle, OUT VIP_BOOLEAN *RecvQueue);
VIP_RETURN VipCQWait(IN VIP_CQ_HANDLE CQHandle, IN VIP_ULONG Timeout, OUT VIP_VI_HANDLE *ViHandle,
                     OUT VIP_BOOLEAN *RecvQueue);
VIP_RETURN VipCQNotify(IN VIP_CQ_HANDLE CQHandle, IN VIP_PVOID Context,
                       IN void (*Handler)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle, VIP_VI_HANDLE ViHandle,
                                          VIP_BOOLEAN RecvQueue));

/* ---- Errors and system management. */
VIP_RETURN VipErrorCallback(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID Context,
                            IN void (*Handler)(VIP_PVOID Context, VIP_ERROR_DESCRIPTOR *ErrorDesc));
VIP_RETURN VipQuerySystemManagementInfo(IN VIP_NIC_HANDLE NicHandle, IN VIP_ULONG InfoType,
                                        OUT VIP_PVOID SysManInfo);

/* ---- Name service. ulnic's is built in: VipNSInit ignores NSInitInfo
 * (pass NULL); "node<k>" and "nic<k>" resolve to node k (NameIndex 0; a node
 * has one address), writing HostAddressLen and the host address bytes and
 * leaving the discriminator to the caller; VipNSGetHostByAddr writes
 * "node<k>" into Name, whose size the caller gives in *NameLen. */
VIP_RETURN VipNSInit(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID NSInitInfo);
VIP_RETURN VipNSGetHostByName(IN VIP_NIC_HANDLE NicHandle, IN VIP_CHAR *Name, OUT VIP_NET_ADDRESS *Address,
                              IN VIP_ULONG NameIndex);
VIP_RETURN VipNSGetHostByAddr(IN VIP_NIC_HANDLE NicHandle, IN VIP_NET_ADDRESS *Address, OUT VIP_CHAR *Name,
                              IN OUT VIP_ULONG *NameLen);
VIP_RETURN VipNSShutdown(IN VIP_NIC_HANDLE NicHandle);

#ifdef __cplusplus
}
#endif

/* The descriptor layout is checked here wherever the language has static
 * assertions (C11, C++11), and in full by tests/host/vipl_header_check.*. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define ULNIC_VIPL_LAYOUT_CHECK(cond, what) static_assert(cond, what)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define ULNIC_VIPL_LAYOUT_CHECK(cond, what) _Static_assert(cond, what)
#endif
#ifdef ULNIC_VIPL_LAYOUT_CHECK
ULNIC_VIPL_LAYOUT_CHECK(sizeof(VIP_PVOID64) == 8, "VIP_PVOID64 is 64 bits");
ULNIC_VIPL_LAYOUT_CHECK(sizeof(VIP_CONTROL_SEGMENT) == 32, "control segment is 32 bytes");
ULNIC_VIPL_LAYOUT_CHECK(sizeof(VIP_ADDRESS_SEGMENT) == 16, "address segment is 16 bytes");
ULNIC_VIPL_LAYOUT_CHECK(sizeof(VIP_DATA_SEGMENT) == 16, "data segment is 16 bytes");
ULNIC_VIPL_LAYOUT_CHECK(sizeof(VIP_DESCRIPTOR) == 64, "descriptor is 64 bytes");
ULNIC_VIPL_LAYOUT_CHECK(offsetof(VIP_DESCRIPTOR, DS) == 32, "segments follow the 32-byte control segment");
#undef ULNIC_VIPL_LAYOUT_CHECK
#endif

#endif /* ULNIC_VIPL_H */

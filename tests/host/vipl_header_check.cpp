// vipl.h as C++: every type, constant, layout and prototype of VIPL 1.0
// (APIS.md "VIPL 1.0") checked at compile time.
//
// Prototypes: decltype(Fn) must be exactly the function type spelled out
// from the spec, and every function is redeclared extern "C" (a conflicting
// language linkage or signature is an error). Addresses are taken only in
// unevaluated operands, so this program links and runs without the library.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "vipl.h"

namespace {

template <typename A, typename B>
constexpr bool same = std::is_same<A, B>::value;

// ---- Basic types: exactly the fixed-width ones underneath.
static_assert(same<VIP_UINT8, std::uint8_t>, "VIP_UINT8");
static_assert(same<VIP_UINT16, std::uint16_t>, "VIP_UINT16");
static_assert(same<VIP_UINT32, std::uint32_t>, "VIP_UINT32");
static_assert(same<VIP_UINT64, std::uint64_t>, "VIP_UINT64");
static_assert(same<VIP_ULONG, unsigned long>, "VIP_ULONG is unsigned long, as published");
static_assert(same<VIP_LONG, long>, "VIP_LONG");
static_assert(same<VIP_USHORT, unsigned short> && sizeof(VIP_USHORT) == 2, "VIP_USHORT");
static_assert(same<VIP_SHORT, short> && sizeof(VIP_SHORT) == 2, "VIP_SHORT");
static_assert(same<VIP_CHAR, char>, "VIP_CHAR");
static_assert(same<VIP_UCHAR, unsigned char>, "VIP_UCHAR");
static_assert(same<VIP_BOOLEAN, int>, "VIP_BOOLEAN");
static_assert(same<VIP_PVOID, void*>, "VIP_PVOID");
static_assert(same<VIP_EVENT_HANDLE, void*>, "VIP_EVENT_HANDLE");
static_assert(same<VIP_QOS, void*>, "VIP_QOS");
static_assert(same<VIP_NIC_HANDLE, void*> && same<VIP_VI_HANDLE, void*> && same<VIP_CQ_HANDLE, void*> &&
                  same<VIP_PROTECTION_HANDLE, void*> && same<VIP_CONN_HANDLE, void*>,
              "handles are opaque pointers");
static_assert(same<VIP_MEM_HANDLE, VIP_UINT32>, "VIP_MEM_HANDLE is VIP_UINT32");
static_assert(same<VIP_RELIABILITY_LEVEL, VIP_UINT16>, "VIP_RELIABILITY_LEVEL is u16");
static_assert(std::is_enum<VIP_RETURN>::value && std::is_enum<VIP_VI_STATE>::value &&
                  std::is_enum<VIP_RESOURCE_CODE>::value && std::is_enum<VIP_ERROR_CODE>::value,
              "enumerations");
static_assert(static_cast<VIP_ULONG>(VIP_INFINITE) == 0xFFFFFFFFul, "VIP_INFINITE fits VIP_ULONG");

// ---- Constants.
static_assert(VIP_TRUE == 1 && VIP_FALSE == 0, "booleans");
static_assert(VIP_INFINITE == 0xFFFFFFFF, "VIP_INFINITE");
static_assert(VIP_DESCRIPTOR_ALIGNMENT == 64, "alignment");
static_assert(VIP_SMI_AUTODISCOVERY == 1 && same<decltype(VIP_SMI_AUTODISCOVERY), VIP_ULONG>, "SMI");

static_assert(VIP_CONTROL_OP_SENDRECV == 0x0, "");
static_assert(VIP_CONTROL_OP_RDMAWRITE == 0x1, "");
static_assert(VIP_CONTROL_OP_RDMAREAD == 0x2, "");
static_assert(VIP_CONTROL_OP_RESERVED == 0x3, "");
static_assert(VIP_CONTROL_OP_MASK == 0x3, "");
static_assert(VIP_CONTROL_IMMEDIATE == 0x4, "");
static_assert(VIP_CONTROL_QFENCE == 0x8, "");
static_assert(VIP_CONTROL_RESERVED == 0xFFF0, "");
static_assert((VIP_CONTROL_OP_MASK | VIP_CONTROL_IMMEDIATE | VIP_CONTROL_QFENCE | VIP_CONTROL_RESERVED) == 0xFFFF,
              "control bits partition the 16-bit word");

static_assert(VIP_STATUS_DONE == 0x1, "");
static_assert(VIP_STATUS_FORMAT_ERROR == 0x2, "");
static_assert(VIP_STATUS_PROTECTION_ERROR == 0x4, "");
static_assert(VIP_STATUS_LENGTH_ERROR == 0x8, "");
static_assert(VIP_STATUS_PARTIAL_ERROR == 0x10, "");
static_assert(VIP_STATUS_DESC_FLUSHED_ERROR == 0x20, "");
static_assert(VIP_STATUS_TRANSPORT_ERROR == 0x40, "");
static_assert(VIP_STATUS_RDMA_PROT_ERROR == 0x80, "");
static_assert(VIP_STATUS_REMOTE_DESC_ERROR == 0x100, "");
static_assert(VIP_STATUS_ERROR_MASK == 0x1FE, "");
static_assert(VIP_STATUS_OP_SEND == 0x0, "");
static_assert(VIP_STATUS_OP_RECEIVE == 0x10000, "");
static_assert(VIP_STATUS_OP_RDMA_WRITE == 0x20000, "");
static_assert(VIP_STATUS_OP_REMOTE_RDMA_WRITE == 0x30000, "");
static_assert(VIP_STATUS_OP_RDMA_READ == 0x40000, "");
static_assert(VIP_STATUS_OP_MASK == 0x70000, "");
static_assert(VIP_STATUS_IMMEDIATE == 0x80000, "");
static_assert(VIP_STATUS_RESERVED == 0xFFF0FE00u, "");
static_assert((VIP_STATUS_DONE | VIP_STATUS_ERROR_MASK | VIP_STATUS_OP_MASK | VIP_STATUS_IMMEDIATE |
               VIP_STATUS_RESERVED) == 0xFFFFFFFFu,
              "status bits partition the 32-bit word");

static_assert(VIP_SERVICE_UNRELIABLE == 0x01, "");
static_assert(VIP_SERVICE_RELIABLE_DELIVERY == 0x02, "");
static_assert(VIP_SERVICE_RELIABLE_RECEPTION == 0x04, "");

static_assert(VIP_SUCCESS == 0 && VIP_NOT_DONE == 1 && VIP_INVALID_PARAMETER == 2 && VIP_ERROR_RESOURCE == 3 &&
                  VIP_TIMEOUT == 4 && VIP_REJECT == 5 && VIP_INVALID_RELIABILITY_LEVEL == 6 &&
                  VIP_INVALID_MTU == 7 && VIP_INVALID_QOS == 8 && VIP_INVALID_PTAG == 9 &&
                  VIP_INVALID_RDMAREAD == 10 && VIP_DESCRIPTOR_ERROR == 11 && VIP_INVALID_STATE == 12 &&
                  VIP_ERROR_NAMESERVICE == 13 && VIP_NO_MATCH == 14,
              "VIP_RETURN: the spec's codes in order from 0");
static_assert(VIP_NOT_REACHABLE == 15 && VIP_ERROR_NOT_SUPPORTED == 16, "VIP_RETURN: cLAN's two after them");
#if !defined(VIP_NOT_REACHABLE) || !defined(VIP_ERROR_NOT_SUPPORTED)
#error "the two extension codes can be tested with #ifdef"
#endif
static_assert(VIP_STATE_IDLE == 0 && VIP_STATE_CONNECTED == 1 && VIP_STATE_CONNECT_PENDING == 2 &&
                  VIP_STATE_ERROR == 3,
              "VIP_VI_STATE");
static_assert(VIP_RESOURCE_NIC == 0 && VIP_RESOURCE_VI == 1 && VIP_RESOURCE_CQ == 2 && VIP_RESOURCE_DESCRIPTOR == 3,
              "VIP_RESOURCE_CODE");
static_assert(VIP_ERROR_POST_DESC == 0 && VIP_ERROR_CONN_LOST == 1 && VIP_ERROR_RECVQ_EMPTY == 2 &&
                  VIP_ERROR_VI_OVERRUN == 3 && VIP_ERROR_RDMAW_PROT == 4 && VIP_ERROR_RDMAW_DATA == 5 &&
                  VIP_ERROR_RDMAW_ABORT == 6 && VIP_ERROR_RDMAR_PROT == 7 && VIP_ERROR_COMP_PROT == 8 &&
                  VIP_ERROR_RDMA_TRANSPORT == 9 && VIP_ERROR_CATASTROPHIC == 10,
              "VIP_ERROR_CODE");

// ---- Descriptor layout: the NIC reads it in place.
static_assert(sizeof(VIP_PVOID64) == 8, "VIP_PVOID64 is 8 bytes");
static_assert(same<decltype(VIP_PVOID64::AddressBits), VIP_UINT64> && same<decltype(VIP_PVOID64::Address), VIP_PVOID>,
              "VIP_PVOID64 members");
static_assert(sizeof(VIP_CONTROL_SEGMENT) == 32, "control segment");
static_assert(offsetof(VIP_CONTROL_SEGMENT, Next) == 0, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, NextHandle) == 8, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, SegCount) == 12, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, Control) == 14, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, Reserved) == 16, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, ImmediateData) == 20, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, Length) == 24, "");
static_assert(offsetof(VIP_CONTROL_SEGMENT, Status) == 28, "");
static_assert(same<decltype(VIP_CONTROL_SEGMENT::Next), VIP_PVOID64> &&
                  same<decltype(VIP_CONTROL_SEGMENT::NextHandle), VIP_MEM_HANDLE> &&
                  same<decltype(VIP_CONTROL_SEGMENT::SegCount), VIP_UINT16> &&
                  same<decltype(VIP_CONTROL_SEGMENT::Control), VIP_UINT16> &&
                  same<decltype(VIP_CONTROL_SEGMENT::Reserved), VIP_UINT32> &&
                  same<decltype(VIP_CONTROL_SEGMENT::ImmediateData), VIP_UINT32> &&
                  same<decltype(VIP_CONTROL_SEGMENT::Length), VIP_UINT32> &&
                  same<decltype(VIP_CONTROL_SEGMENT::Status), VIP_UINT32>,
              "control segment field types");
static_assert(sizeof(VIP_ADDRESS_SEGMENT) == 16 && offsetof(VIP_ADDRESS_SEGMENT, Data) == 0 &&
                  offsetof(VIP_ADDRESS_SEGMENT, Handle) == 8 && offsetof(VIP_ADDRESS_SEGMENT, Reserved) == 12,
              "address segment");
static_assert(sizeof(VIP_DATA_SEGMENT) == 16 && offsetof(VIP_DATA_SEGMENT, Data) == 0 &&
                  offsetof(VIP_DATA_SEGMENT, Handle) == 8 && offsetof(VIP_DATA_SEGMENT, Length) == 12,
              "data segment");
static_assert(same<decltype(VIP_DATA_SEGMENT::Data), VIP_PVOID64> &&
                  same<decltype(VIP_DATA_SEGMENT::Handle), VIP_MEM_HANDLE> &&
                  same<decltype(VIP_ADDRESS_SEGMENT::Data), VIP_PVOID64> &&
                  same<decltype(VIP_ADDRESS_SEGMENT::Handle), VIP_MEM_HANDLE>,
              "segment field types");
static_assert(sizeof(VIP_DESCRIPTOR_SEGMENT) == 16 && offsetof(VIP_DESCRIPTOR_SEGMENT, Remote) == 0 &&
                  offsetof(VIP_DESCRIPTOR_SEGMENT, Local) == 0,
              "descriptor segment");
static_assert(same<decltype(VIP_DESCRIPTOR_SEGMENT::Remote), VIP_ADDRESS_SEGMENT> &&
                  same<decltype(VIP_DESCRIPTOR_SEGMENT::Local), VIP_DATA_SEGMENT>,
              "descriptor segment members");
static_assert(sizeof(VIP_DESCRIPTOR) == 64, "descriptor");
static_assert(offsetof(VIP_DESCRIPTOR, CS) == 0 && offsetof(VIP_DESCRIPTOR, DS) == 32, "DS starts at offset 32");
static_assert(same<decltype(VIP_DESCRIPTOR::DS), VIP_DESCRIPTOR_SEGMENT[2]>, "two named segments");
static_assert(std::is_standard_layout<VIP_DESCRIPTOR>::value && std::is_trivially_copyable<VIP_DESCRIPTOR>::value,
              "a C struct in C++ too");

// ---- Network address.
static_assert(offsetof(VIP_NET_ADDRESS, HostAddressLen) == 0 && offsetof(VIP_NET_ADDRESS, DiscriminatorLen) == 2 &&
                  offsetof(VIP_NET_ADDRESS, HostAddress) == 4,
              "VIP_NET_ADDRESS");
static_assert(same<decltype(VIP_NET_ADDRESS::HostAddressLen), VIP_UINT16> &&
                  same<decltype(VIP_NET_ADDRESS::DiscriminatorLen), VIP_UINT16> &&
                  same<decltype(VIP_NET_ADDRESS::HostAddress), VIP_UINT8[1]>,
              "VIP_NET_ADDRESS field types");

// ---- Attribute, error and SMI structures: field types and order.
#define FIELD(S, f, T) static_assert(same<decltype(S::f), T>, #S "." #f)
#define BEFORE(S, a, b) static_assert(offsetof(S, a) < offsetof(S, b), #S ": " #a " before " #b)
FIELD(VIP_NIC_ATTRIBUTES, Name, VIP_CHAR[64]);
FIELD(VIP_NIC_ATTRIBUTES, HardwareVersion, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, ProviderVersion, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, NicAddressLen, VIP_UINT16);
FIELD(VIP_NIC_ATTRIBUTES, LocalNicAddress, const VIP_UINT8*);
FIELD(VIP_NIC_ATTRIBUTES, ThreadSafe, VIP_BOOLEAN);
FIELD(VIP_NIC_ATTRIBUTES, MaxDiscriminatorLen, VIP_UINT16);
FIELD(VIP_NIC_ATTRIBUTES, MaxRegisterBytes, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxRegisterRegions, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxRegisterBlockBytes, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxVI, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxDescriptorsPerQueue, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxSegmentsPerDesc, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxCQ, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxCQEntries, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxTransferSize, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, NativeMTU, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, MaxPtags, VIP_ULONG);
FIELD(VIP_NIC_ATTRIBUTES, ReliabilityLevelSupport, VIP_RELIABILITY_LEVEL);
FIELD(VIP_NIC_ATTRIBUTES, RDMAReadSupport, VIP_RELIABILITY_LEVEL);
static_assert(offsetof(VIP_NIC_ATTRIBUTES, Name) == 0, "");
BEFORE(VIP_NIC_ATTRIBUTES, Name, HardwareVersion);
BEFORE(VIP_NIC_ATTRIBUTES, HardwareVersion, ProviderVersion);
BEFORE(VIP_NIC_ATTRIBUTES, ProviderVersion, NicAddressLen);
BEFORE(VIP_NIC_ATTRIBUTES, NicAddressLen, LocalNicAddress);
BEFORE(VIP_NIC_ATTRIBUTES, LocalNicAddress, ThreadSafe);
BEFORE(VIP_NIC_ATTRIBUTES, ThreadSafe, MaxDiscriminatorLen);
BEFORE(VIP_NIC_ATTRIBUTES, MaxDiscriminatorLen, MaxRegisterBytes);
BEFORE(VIP_NIC_ATTRIBUTES, MaxRegisterBytes, MaxRegisterRegions);
BEFORE(VIP_NIC_ATTRIBUTES, MaxRegisterRegions, MaxRegisterBlockBytes);
BEFORE(VIP_NIC_ATTRIBUTES, MaxRegisterBlockBytes, MaxVI);
BEFORE(VIP_NIC_ATTRIBUTES, MaxVI, MaxDescriptorsPerQueue);
BEFORE(VIP_NIC_ATTRIBUTES, MaxDescriptorsPerQueue, MaxSegmentsPerDesc);
BEFORE(VIP_NIC_ATTRIBUTES, MaxSegmentsPerDesc, MaxCQ);
BEFORE(VIP_NIC_ATTRIBUTES, MaxCQ, MaxCQEntries);
BEFORE(VIP_NIC_ATTRIBUTES, MaxCQEntries, MaxTransferSize);
BEFORE(VIP_NIC_ATTRIBUTES, MaxTransferSize, NativeMTU);
BEFORE(VIP_NIC_ATTRIBUTES, NativeMTU, MaxPtags);
BEFORE(VIP_NIC_ATTRIBUTES, MaxPtags, ReliabilityLevelSupport);
BEFORE(VIP_NIC_ATTRIBUTES, ReliabilityLevelSupport, RDMAReadSupport);

FIELD(VIP_VI_ATTRIBUTES, ReliabilityLevel, VIP_RELIABILITY_LEVEL);
FIELD(VIP_VI_ATTRIBUTES, MaxTransferSize, VIP_ULONG);
FIELD(VIP_VI_ATTRIBUTES, QoS, VIP_QOS);
FIELD(VIP_VI_ATTRIBUTES, Ptag, VIP_PROTECTION_HANDLE);
FIELD(VIP_VI_ATTRIBUTES, EnableRdmaWrite, VIP_BOOLEAN);
FIELD(VIP_VI_ATTRIBUTES, EnableRdmaRead, VIP_BOOLEAN);
static_assert(offsetof(VIP_VI_ATTRIBUTES, ReliabilityLevel) == 0, "");
BEFORE(VIP_VI_ATTRIBUTES, ReliabilityLevel, MaxTransferSize);
BEFORE(VIP_VI_ATTRIBUTES, MaxTransferSize, QoS);
BEFORE(VIP_VI_ATTRIBUTES, QoS, Ptag);
BEFORE(VIP_VI_ATTRIBUTES, Ptag, EnableRdmaWrite);
BEFORE(VIP_VI_ATTRIBUTES, EnableRdmaWrite, EnableRdmaRead);

FIELD(VIP_MEM_ATTRIBUTES, Ptag, VIP_PROTECTION_HANDLE);
FIELD(VIP_MEM_ATTRIBUTES, EnableRdmaWrite, VIP_BOOLEAN);
FIELD(VIP_MEM_ATTRIBUTES, EnableRdmaRead, VIP_BOOLEAN);
static_assert(offsetof(VIP_MEM_ATTRIBUTES, Ptag) == 0, "");
BEFORE(VIP_MEM_ATTRIBUTES, Ptag, EnableRdmaWrite);
BEFORE(VIP_MEM_ATTRIBUTES, EnableRdmaWrite, EnableRdmaRead);

FIELD(VIP_ERROR_DESCRIPTOR, NicHandle, VIP_NIC_HANDLE);
FIELD(VIP_ERROR_DESCRIPTOR, ViHandle, VIP_VI_HANDLE);
FIELD(VIP_ERROR_DESCRIPTOR, CQHandle, VIP_CQ_HANDLE);
FIELD(VIP_ERROR_DESCRIPTOR, DescriptorPtr, VIP_DESCRIPTOR*);
FIELD(VIP_ERROR_DESCRIPTOR, OpCode, VIP_ULONG);
FIELD(VIP_ERROR_DESCRIPTOR, ResourceCode, VIP_RESOURCE_CODE);
FIELD(VIP_ERROR_DESCRIPTOR, ErrorCode, VIP_ERROR_CODE);
static_assert(offsetof(VIP_ERROR_DESCRIPTOR, NicHandle) == 0, "");
BEFORE(VIP_ERROR_DESCRIPTOR, NicHandle, ViHandle);
BEFORE(VIP_ERROR_DESCRIPTOR, ViHandle, CQHandle);
BEFORE(VIP_ERROR_DESCRIPTOR, CQHandle, DescriptorPtr);
BEFORE(VIP_ERROR_DESCRIPTOR, DescriptorPtr, OpCode);
BEFORE(VIP_ERROR_DESCRIPTOR, OpCode, ResourceCode);
BEFORE(VIP_ERROR_DESCRIPTOR, ResourceCode, ErrorCode);

FIELD(VIP_AUTODISCOVERY_LIST, NumberOfHops, VIP_ULONG);
FIELD(VIP_AUTODISCOVERY_LIST, ADAddrArray, VIP_NET_ADDRESS**);
FIELD(VIP_AUTODISCOVERY_LIST, NumAdAddrs, VIP_ULONG);
BEFORE(VIP_AUTODISCOVERY_LIST, NumberOfHops, ADAddrArray);
BEFORE(VIP_AUTODISCOVERY_LIST, ADAddrArray, NumAdAddrs);
#undef FIELD
#undef BEFORE

}  // namespace

// ---- Prototypes, spelled out from the spec.
using NotifyViFn = void(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR*);
using NotifyCqFn = void(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN);
using ErrorFn = void(VIP_PVOID, VIP_ERROR_DESCRIPTOR*);

using OpenNicFn = VIP_RETURN(const VIP_CHAR*, VIP_NIC_HANDLE*);
using CloseNicFn = VIP_RETURN(VIP_NIC_HANDLE);
using QueryNicFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_NIC_ATTRIBUTES*);
using RegisterMemFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PVOID, VIP_ULONG, VIP_MEM_ATTRIBUTES*, VIP_MEM_HANDLE*);
using DeregisterMemFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PVOID, VIP_MEM_HANDLE);
using MemAttrsFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PVOID, VIP_MEM_HANDLE, VIP_MEM_ATTRIBUTES*);
using CreatePtagFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PROTECTION_HANDLE*);
using DestroyPtagFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PROTECTION_HANDLE);
using CreateViFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_VI_ATTRIBUTES*, VIP_CQ_HANDLE, VIP_CQ_HANDLE, VIP_VI_HANDLE*);
using ViFn = VIP_RETURN(VIP_VI_HANDLE);
using QueryViFn = VIP_RETURN(VIP_VI_HANDLE, VIP_VI_STATE*, VIP_VI_ATTRIBUTES*, VIP_BOOLEAN*, VIP_BOOLEAN*);
using SetViAttrsFn = VIP_RETURN(VIP_VI_HANDLE, VIP_VI_ATTRIBUTES*);
using PostFn = VIP_RETURN(VIP_VI_HANDLE, VIP_DESCRIPTOR*, VIP_MEM_HANDLE);
using DoneFn = VIP_RETURN(VIP_VI_HANDLE, VIP_DESCRIPTOR**);
using WaitFn = VIP_RETURN(VIP_VI_HANDLE, VIP_ULONG, VIP_DESCRIPTOR**);
using NotifyFn = VIP_RETURN(VIP_VI_HANDLE, VIP_PVOID, void (*)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR*));
using ConnectWaitFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_NET_ADDRESS*, VIP_ULONG, VIP_NET_ADDRESS*, VIP_VI_ATTRIBUTES*,
                                 VIP_CONN_HANDLE*);
using ConnectAcceptFn = VIP_RETURN(VIP_CONN_HANDLE, VIP_VI_HANDLE);
using ConnectRejectFn = VIP_RETURN(VIP_CONN_HANDLE);
using ConnectRequestFn = VIP_RETURN(VIP_VI_HANDLE, VIP_NET_ADDRESS*, VIP_NET_ADDRESS*, VIP_ULONG, VIP_VI_ATTRIBUTES*);
using PeerRequestFn = VIP_RETURN(VIP_VI_HANDLE, VIP_NET_ADDRESS*, VIP_NET_ADDRESS*, VIP_ULONG);
using PeerDoneFn = VIP_RETURN(VIP_VI_HANDLE, VIP_VI_ATTRIBUTES*);
using CreateCqFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_ULONG, VIP_CQ_HANDLE*);
using DestroyCqFn = VIP_RETURN(VIP_CQ_HANDLE);
using ResizeCqFn = VIP_RETURN(VIP_CQ_HANDLE, VIP_ULONG);
using CqDoneFn = VIP_RETURN(VIP_CQ_HANDLE, VIP_VI_HANDLE*, VIP_BOOLEAN*);
using CqWaitFn = VIP_RETURN(VIP_CQ_HANDLE, VIP_ULONG, VIP_VI_HANDLE*, VIP_BOOLEAN*);
using CqNotifyFn = VIP_RETURN(VIP_CQ_HANDLE, VIP_PVOID, void (*)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN));
using ErrorCallbackFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PVOID, void (*)(VIP_PVOID, VIP_ERROR_DESCRIPTOR*));
using QuerySmiFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_ULONG, VIP_PVOID);
using NsInitFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_PVOID);
using NsByNameFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_CHAR*, VIP_NET_ADDRESS*, VIP_ULONG);
using NsByAddrFn = VIP_RETURN(VIP_NIC_HANDLE, VIP_NET_ADDRESS*, VIP_CHAR*, VIP_ULONG*);
using NsShutdownFn = VIP_RETURN(VIP_NIC_HANDLE);

// Redeclared with C linkage: an error if vipl.h gave them C++ linkage.
extern "C" {
OpenNicFn VipOpenNic;
CloseNicFn VipCloseNic;
QueryNicFn VipQueryNic;
RegisterMemFn VipRegisterMem;
DeregisterMemFn VipDeregisterMem;
MemAttrsFn VipQueryMem, VipSetMemAttributes;
CreatePtagFn VipCreatePtag;
DestroyPtagFn VipDestroyPtag;
CreateViFn VipCreateVi;
ViFn VipDestroyVi, VipDisconnect;
QueryViFn VipQueryVi;
SetViAttrsFn VipSetViAttributes;
PostFn VipPostSend, VipPostRecv;
DoneFn VipSendDone, VipRecvDone;
WaitFn VipSendWait, VipRecvWait;
NotifyFn VipSendNotify, VipRecvNotify;
ConnectWaitFn VipConnectWait;
ConnectAcceptFn VipConnectAccept;
ConnectRejectFn VipConnectReject;
ConnectRequestFn VipConnectRequest;
PeerRequestFn VipConnectPeerRequest;
PeerDoneFn VipConnectPeerDone, VipConnectPeerWait;
CreateCqFn VipCreateCQ;
DestroyCqFn VipDestroyCQ;
ResizeCqFn VipResizeCQ;
CqDoneFn VipCQDone;
CqWaitFn VipCQWait;
CqNotifyFn VipCQNotify;
ErrorCallbackFn VipErrorCallback;
QuerySmiFn VipQuerySystemManagementInfo;
NsInitFn VipNSInit;
NsByNameFn VipNSGetHostByName;
NsByAddrFn VipNSGetHostByAddr;
NsShutdownFn VipNSShutdown;
}

namespace {

// decltype and sizeof do not evaluate: no reference reaches the object file.
#define TAKE(T, fn)                                             \
  static_assert(same<decltype(fn), T>, #fn ": signature");     \
  static_assert(sizeof(static_cast<T*>(&fn)) == sizeof(T*), #fn)
TAKE(OpenNicFn, VipOpenNic);
TAKE(CloseNicFn, VipCloseNic);
TAKE(QueryNicFn, VipQueryNic);
TAKE(RegisterMemFn, VipRegisterMem);
TAKE(DeregisterMemFn, VipDeregisterMem);
TAKE(MemAttrsFn, VipQueryMem);
TAKE(MemAttrsFn, VipSetMemAttributes);
TAKE(CreatePtagFn, VipCreatePtag);
TAKE(DestroyPtagFn, VipDestroyPtag);
TAKE(CreateViFn, VipCreateVi);
TAKE(ViFn, VipDestroyVi);
TAKE(QueryViFn, VipQueryVi);
TAKE(SetViAttrsFn, VipSetViAttributes);
TAKE(PostFn, VipPostSend);
TAKE(PostFn, VipPostRecv);
TAKE(DoneFn, VipSendDone);
TAKE(DoneFn, VipRecvDone);
TAKE(WaitFn, VipSendWait);
TAKE(WaitFn, VipRecvWait);
TAKE(NotifyFn, VipSendNotify);
TAKE(NotifyFn, VipRecvNotify);
TAKE(ConnectWaitFn, VipConnectWait);
TAKE(ConnectAcceptFn, VipConnectAccept);
TAKE(ConnectRejectFn, VipConnectReject);
TAKE(ConnectRequestFn, VipConnectRequest);
TAKE(ViFn, VipDisconnect);
TAKE(PeerRequestFn, VipConnectPeerRequest);
TAKE(PeerDoneFn, VipConnectPeerDone);
TAKE(PeerDoneFn, VipConnectPeerWait);
TAKE(CreateCqFn, VipCreateCQ);
TAKE(DestroyCqFn, VipDestroyCQ);
TAKE(ResizeCqFn, VipResizeCQ);
TAKE(CqDoneFn, VipCQDone);
TAKE(CqWaitFn, VipCQWait);
TAKE(CqNotifyFn, VipCQNotify);
TAKE(ErrorCallbackFn, VipErrorCallback);
TAKE(QuerySmiFn, VipQuerySystemManagementInfo);
TAKE(NsInitFn, VipNSInit);
TAKE(NsByNameFn, VipNSGetHostByName);
TAKE(NsByAddrFn, VipNSGetHostByAddr);
TAKE(NsShutdownFn, VipNSShutdown);
#undef TAKE

static_assert(same<VIP_VI_CALLBACK, NotifyViFn*> && same<VIP_CQ_CALLBACK, NotifyCqFn*> &&
                  same<VIP_ERROR_HANDLER, ErrorFn*>,
              "cLAN's callback typedef names");

// Callbacks as a C++ program writes them: plain functions and captureless lambdas.
void on_vi(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR*) {}
void on_cq(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) {}

int check_structures() {
  union {
    VIP_NET_ADDRESS a;
    VIP_UINT8 bytes[sizeof(VIP_NET_ADDRESS) + 2 + 8];
  } addr{};
  addr.a.HostAddressLen = 2;
  addr.a.DiscriminatorLen = 8;
  addr.a.HostAddress[0] = 3;  // node 3, little-endian

  VIP_NIC_ATTRIBUTES nic_attrs{};
  nic_attrs.NicAddressLen = 2;
  nic_attrs.LocalNicAddress = addr.a.HostAddress;
  VIP_MEM_ATTRIBUTES mem_attrs{};
  mem_attrs.EnableRdmaWrite = VIP_TRUE;
  VIP_VI_ATTRIBUTES vi_attrs{};
  vi_attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  vi_attrs.Ptag = mem_attrs.Ptag;
  VIP_VI_STATE state = VIP_STATE_CONNECTED;

  alignas(VIP_DESCRIPTOR_ALIGNMENT) static char buf[64];
  VIP_DESCRIPTOR desc{};
  desc.CS.Control = VIP_CONTROL_OP_RDMAWRITE | VIP_CONTROL_IMMEDIATE;
  desc.CS.SegCount = 2;
  desc.CS.ImmediateData = 0xABCD;
  desc.CS.Length = sizeof buf;
  desc.DS[0].Remote.Data.AddressBits = 0x1000;
  desc.DS[0].Remote.Handle = 7;
  desc.DS[1].Local.Data.Address = buf;
  desc.DS[1].Local.Handle = 9;
  desc.DS[1].Local.Length = sizeof buf;
  VIP_CONTROL_SEGMENT& cs = desc.CS;
  VIP_DESCRIPTOR_SEGMENT& seg = desc.DS[0];
  VIP_PVOID64 next{};
  cs.Next = next;

  VIP_ERROR_DESCRIPTOR err{};
  err.DescriptorPtr = &desc;
  err.ResourceCode = VIP_RESOURCE_DESCRIPTOR;
  err.ErrorCode = VIP_ERROR_CATASTROPHIC;
  VIP_NET_ADDRESS* found[1] = {&addr.a};
  VIP_AUTODISCOVERY_LIST list{};
  list.ADAddrArray = found;
  list.NumAdAddrs = 1;

  VIP_VI_CALLBACK vi_cb = on_vi;
  VIP_CQ_CALLBACK cq_cb = on_cq;
  VIP_ERROR_HANDLER err_cb = [](VIP_PVOID, VIP_ERROR_DESCRIPTOR*) {};
  VIP_RETURN rc = VIP_SUCCESS;
  VIP_UCHAR uc = 1;
  VIP_USHORT us = 2;
  VIP_SHORT ss = -3;
  VIP_LONG sl = -4;
  VIP_EVENT_HANDLE ev = nullptr;

  bool ok = addr.a.HostAddress[0] == 3 && state == VIP_STATE_CONNECTED && seg.Remote.Handle == 7 &&
            err.DescriptorPtr->CS.ImmediateData == 0xABCD && list.ADAddrArray[0]->DiscriminatorLen == 8 &&
            vi_cb != nullptr && cq_cb != nullptr && err_cb != nullptr && rc == VIP_SUCCESS &&
            uc + us + ss + sl == -4 && ev == nullptr && vi_attrs.Ptag == nullptr &&
            nic_attrs.LocalNicAddress == addr.a.HostAddress;
  return ok ? 0 : 1;
}

}  // namespace

int main() { return check_structures(); }

/* vipl.h as C99 (-std=c99 -pedantic): every type, constant, layout and
 * prototype of VIPL 1.0 (APIS.md "VIPL 1.0") checked at compile time.
 *
 * Prototypes are checked by redeclaring each function through a function
 * type spelled out from the spec: C makes a conflicting redeclaration an
 * error. Their addresses are taken only inside sizeof, which does not
 * evaluate its operand, so this program links and runs without the library. */
#include <stddef.h>
#include <stdint.h>

#include "vipl.h"

/* C99 has no _Static_assert: a negative array size fails the build. */
#define CHECK(name, cond) typedef char check_##name[(cond) ? 1 : -1]

/* ---- Basic types: widths, signedness, and the types underneath. */
CHECK(uint8_size, sizeof(VIP_UINT8) == 1);
CHECK(uint16_size, sizeof(VIP_UINT16) == 2);
CHECK(uint32_size, sizeof(VIP_UINT32) == 4);
CHECK(uint64_size, sizeof(VIP_UINT64) == 8);
CHECK(uint8_unsigned, (VIP_UINT8)-1 > 0);
CHECK(uint16_unsigned, (VIP_UINT16)-1 > 0);
CHECK(uint32_unsigned, (VIP_UINT32)-1 > 0);
CHECK(uint64_unsigned, (VIP_UINT64)-1 > 0);
CHECK(ulong_is_unsigned_long, sizeof(VIP_ULONG) == sizeof(unsigned long) && (VIP_ULONG)-1 > 0);
CHECK(ulong_holds_infinite, (VIP_ULONG)VIP_INFINITE == 0xFFFFFFFFul);
CHECK(long_signed, (VIP_LONG)-1 < 0 && sizeof(VIP_LONG) == sizeof(long));
CHECK(ushort_size, sizeof(VIP_USHORT) == 2 && (VIP_USHORT)-1 > 0);
CHECK(short_size, sizeof(VIP_SHORT) == 2 && (VIP_SHORT)-1 < 0);
CHECK(char_size, sizeof(VIP_CHAR) == 1 && sizeof(VIP_UCHAR) == 1 && (VIP_UCHAR)-1 > 0);
CHECK(boolean_is_int, sizeof(VIP_BOOLEAN) == sizeof(int) && (VIP_BOOLEAN)-1 < 0);
CHECK(pvoid_size, sizeof(VIP_PVOID) == sizeof(void *) && sizeof(VIP_EVENT_HANDLE) == sizeof(void *));
CHECK(qos_size, sizeof(VIP_QOS) == sizeof(void *));
CHECK(mem_handle_32, sizeof(VIP_MEM_HANDLE) == 4 && (VIP_MEM_HANDLE)-1 > 0);
CHECK(handles_are_pointers,
      sizeof(VIP_NIC_HANDLE) == sizeof(void *) && sizeof(VIP_VI_HANDLE) == sizeof(void *) &&
          sizeof(VIP_CQ_HANDLE) == sizeof(void *) && sizeof(VIP_PROTECTION_HANDLE) == sizeof(void *) &&
          sizeof(VIP_CONN_HANDLE) == sizeof(void *));
CHECK(reliability_16, sizeof(VIP_RELIABILITY_LEVEL) == 2 && (VIP_RELIABILITY_LEVEL)-1 > 0);

/* ---- Constants. */
CHECK(true_false, VIP_TRUE == 1 && VIP_FALSE == 0);
CHECK(infinite, VIP_INFINITE == 0xFFFFFFFF);
CHECK(alignment, VIP_DESCRIPTOR_ALIGNMENT == 64);
CHECK(smi_autodiscovery, VIP_SMI_AUTODISCOVERY == 1);

CHECK(control_op_sendrecv, VIP_CONTROL_OP_SENDRECV == 0x0);
CHECK(control_op_rdmawrite, VIP_CONTROL_OP_RDMAWRITE == 0x1);
CHECK(control_op_rdmaread, VIP_CONTROL_OP_RDMAREAD == 0x2);
CHECK(control_op_reserved, VIP_CONTROL_OP_RESERVED == 0x3);
CHECK(control_op_mask, VIP_CONTROL_OP_MASK == 0x3);
CHECK(control_immediate, VIP_CONTROL_IMMEDIATE == 0x4);
CHECK(control_qfence, VIP_CONTROL_QFENCE == 0x8);
CHECK(control_reserved, VIP_CONTROL_RESERVED == 0xFFF0);

CHECK(status_done, VIP_STATUS_DONE == 0x1);
CHECK(status_format, VIP_STATUS_FORMAT_ERROR == 0x2);
CHECK(status_protection, VIP_STATUS_PROTECTION_ERROR == 0x4);
CHECK(status_length, VIP_STATUS_LENGTH_ERROR == 0x8);
CHECK(status_partial, VIP_STATUS_PARTIAL_ERROR == 0x10);
CHECK(status_flushed, VIP_STATUS_DESC_FLUSHED_ERROR == 0x20);
CHECK(status_transport, VIP_STATUS_TRANSPORT_ERROR == 0x40);
CHECK(status_rdma_prot, VIP_STATUS_RDMA_PROT_ERROR == 0x80);
CHECK(status_remote_desc, VIP_STATUS_REMOTE_DESC_ERROR == 0x100);
CHECK(status_error_mask, VIP_STATUS_ERROR_MASK == 0x1FE);
CHECK(status_op_send, VIP_STATUS_OP_SEND == 0x0);
CHECK(status_op_receive, VIP_STATUS_OP_RECEIVE == 0x10000);
CHECK(status_op_rdma_write, VIP_STATUS_OP_RDMA_WRITE == 0x20000);
CHECK(status_op_remote_rdma_write, VIP_STATUS_OP_REMOTE_RDMA_WRITE == 0x30000);
CHECK(status_op_rdma_read, VIP_STATUS_OP_RDMA_READ == 0x40000);
CHECK(status_op_mask, VIP_STATUS_OP_MASK == 0x70000);
CHECK(status_immediate, VIP_STATUS_IMMEDIATE == 0x80000);
CHECK(status_reserved, VIP_STATUS_RESERVED == 0xFFF0FE00u);
/* The status bits partition the 32-bit word. */
CHECK(status_partition, (VIP_STATUS_DONE | VIP_STATUS_ERROR_MASK | VIP_STATUS_OP_MASK | VIP_STATUS_IMMEDIATE |
                         VIP_STATUS_RESERVED) == 0xFFFFFFFFu);
CHECK(control_partition, (VIP_CONTROL_OP_MASK | VIP_CONTROL_IMMEDIATE | VIP_CONTROL_QFENCE |
                          VIP_CONTROL_RESERVED) == 0xFFFF);

CHECK(service_unreliable, VIP_SERVICE_UNRELIABLE == 0x01);
CHECK(service_reliable_delivery, VIP_SERVICE_RELIABLE_DELIVERY == 0x02);
CHECK(service_reliable_reception, VIP_SERVICE_RELIABLE_RECEPTION == 0x04);

CHECK(ret_success, VIP_SUCCESS == 0);
CHECK(ret_not_done, VIP_NOT_DONE == 1);
CHECK(ret_invalid_parameter, VIP_INVALID_PARAMETER == 2);
CHECK(ret_error_resource, VIP_ERROR_RESOURCE == 3);
CHECK(ret_timeout, VIP_TIMEOUT == 4);
CHECK(ret_reject, VIP_REJECT == 5);
CHECK(ret_invalid_reliability, VIP_INVALID_RELIABILITY_LEVEL == 6);
CHECK(ret_invalid_mtu, VIP_INVALID_MTU == 7);
CHECK(ret_invalid_qos, VIP_INVALID_QOS == 8);
CHECK(ret_invalid_ptag, VIP_INVALID_PTAG == 9);
CHECK(ret_invalid_rdmaread, VIP_INVALID_RDMAREAD == 10);
CHECK(ret_descriptor_error, VIP_DESCRIPTOR_ERROR == 11);
CHECK(ret_invalid_state, VIP_INVALID_STATE == 12);
CHECK(ret_error_nameservice, VIP_ERROR_NAMESERVICE == 13);
CHECK(ret_no_match, VIP_NO_MATCH == 14);
CHECK(ret_not_reachable, VIP_NOT_REACHABLE == 15);
CHECK(ret_not_supported, VIP_ERROR_NOT_SUPPORTED == 16);
#if !defined(VIP_NOT_REACHABLE) || !defined(VIP_ERROR_NOT_SUPPORTED)
#error "the two extension codes can be tested with #ifdef"
#endif

CHECK(state_idle, VIP_STATE_IDLE == 0);
CHECK(state_connected, VIP_STATE_CONNECTED == 1);
CHECK(state_connect_pending, VIP_STATE_CONNECT_PENDING == 2);
CHECK(state_error, VIP_STATE_ERROR == 3);

CHECK(resource_nic, VIP_RESOURCE_NIC == 0);
CHECK(resource_vi, VIP_RESOURCE_VI == 1);
CHECK(resource_cq, VIP_RESOURCE_CQ == 2);
CHECK(resource_descriptor, VIP_RESOURCE_DESCRIPTOR == 3);

CHECK(error_post_desc, VIP_ERROR_POST_DESC == 0);
CHECK(error_conn_lost, VIP_ERROR_CONN_LOST == 1);
CHECK(error_recvq_empty, VIP_ERROR_RECVQ_EMPTY == 2);
CHECK(error_vi_overrun, VIP_ERROR_VI_OVERRUN == 3);
CHECK(error_rdmaw_prot, VIP_ERROR_RDMAW_PROT == 4);
CHECK(error_rdmaw_data, VIP_ERROR_RDMAW_DATA == 5);
CHECK(error_rdmaw_abort, VIP_ERROR_RDMAW_ABORT == 6);
CHECK(error_rdmar_prot, VIP_ERROR_RDMAR_PROT == 7);
CHECK(error_comp_prot, VIP_ERROR_COMP_PROT == 8);
CHECK(error_rdma_transport, VIP_ERROR_RDMA_TRANSPORT == 9);
CHECK(error_catastrophic, VIP_ERROR_CATASTROPHIC == 10);

/* ---- Descriptor layout: the NIC reads it in place. */
CHECK(pvoid64_size, sizeof(VIP_PVOID64) == 8);
CHECK(pvoid64_overlay, offsetof(VIP_PVOID64, AddressBits) == 0 && offsetof(VIP_PVOID64, Address) == 0);
CHECK(cs_size, sizeof(VIP_CONTROL_SEGMENT) == 32);
CHECK(cs_next, offsetof(VIP_CONTROL_SEGMENT, Next) == 0);
CHECK(cs_next_handle, offsetof(VIP_CONTROL_SEGMENT, NextHandle) == 8);
CHECK(cs_seg_count, offsetof(VIP_CONTROL_SEGMENT, SegCount) == 12);
CHECK(cs_control, offsetof(VIP_CONTROL_SEGMENT, Control) == 14);
CHECK(cs_reserved, offsetof(VIP_CONTROL_SEGMENT, Reserved) == 16);
CHECK(cs_immediate, offsetof(VIP_CONTROL_SEGMENT, ImmediateData) == 20);
CHECK(cs_length, offsetof(VIP_CONTROL_SEGMENT, Length) == 24);
CHECK(cs_status, offsetof(VIP_CONTROL_SEGMENT, Status) == 28);
CHECK(cs_field_sizes, sizeof(((VIP_CONTROL_SEGMENT *)0)->SegCount) == 2 &&
                          sizeof(((VIP_CONTROL_SEGMENT *)0)->Control) == 2 &&
                          sizeof(((VIP_CONTROL_SEGMENT *)0)->Status) == 4);
CHECK(as_size, sizeof(VIP_ADDRESS_SEGMENT) == 16);
CHECK(as_fields, offsetof(VIP_ADDRESS_SEGMENT, Data) == 0 && offsetof(VIP_ADDRESS_SEGMENT, Handle) == 8 &&
                     offsetof(VIP_ADDRESS_SEGMENT, Reserved) == 12);
CHECK(ds_size, sizeof(VIP_DATA_SEGMENT) == 16);
CHECK(ds_fields, offsetof(VIP_DATA_SEGMENT, Data) == 0 && offsetof(VIP_DATA_SEGMENT, Handle) == 8 &&
                     offsetof(VIP_DATA_SEGMENT, Length) == 12);
CHECK(seg_size, sizeof(VIP_DESCRIPTOR_SEGMENT) == 16);
CHECK(seg_overlay, offsetof(VIP_DESCRIPTOR_SEGMENT, Remote) == 0 && offsetof(VIP_DESCRIPTOR_SEGMENT, Local) == 0);
CHECK(desc_size, sizeof(VIP_DESCRIPTOR) == 64);
CHECK(desc_cs, offsetof(VIP_DESCRIPTOR, CS) == 0);
CHECK(desc_ds, offsetof(VIP_DESCRIPTOR, DS) == 32);
CHECK(desc_ds1, offsetof(VIP_DESCRIPTOR, DS[1]) == 48);
CHECK(desc_fits_alignment, sizeof(VIP_DESCRIPTOR) % VIP_DESCRIPTOR_ALIGNMENT == 0);

/* ---- Network address: host address bytes right after the two lengths. */
CHECK(net_address, offsetof(VIP_NET_ADDRESS, HostAddressLen) == 0 &&
                       offsetof(VIP_NET_ADDRESS, DiscriminatorLen) == 2 &&
                       offsetof(VIP_NET_ADDRESS, HostAddress) == 4 &&
                       sizeof(((VIP_NET_ADDRESS *)0)->HostAddress[0]) == 1);

/* ---- Attribute and error structures: field order as published. */
CHECK(nic_attrs_order,
      offsetof(VIP_NIC_ATTRIBUTES, Name) == 0 &&
          offsetof(VIP_NIC_ATTRIBUTES, HardwareVersion) < offsetof(VIP_NIC_ATTRIBUTES, ProviderVersion) &&
          offsetof(VIP_NIC_ATTRIBUTES, ProviderVersion) < offsetof(VIP_NIC_ATTRIBUTES, NicAddressLen) &&
          offsetof(VIP_NIC_ATTRIBUTES, NicAddressLen) < offsetof(VIP_NIC_ATTRIBUTES, LocalNicAddress) &&
          offsetof(VIP_NIC_ATTRIBUTES, LocalNicAddress) < offsetof(VIP_NIC_ATTRIBUTES, ThreadSafe) &&
          offsetof(VIP_NIC_ATTRIBUTES, ThreadSafe) < offsetof(VIP_NIC_ATTRIBUTES, MaxDiscriminatorLen) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxDiscriminatorLen) < offsetof(VIP_NIC_ATTRIBUTES, MaxRegisterBytes) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxRegisterBytes) < offsetof(VIP_NIC_ATTRIBUTES, MaxRegisterRegions) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxRegisterRegions) < offsetof(VIP_NIC_ATTRIBUTES, MaxRegisterBlockBytes) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxRegisterBlockBytes) < offsetof(VIP_NIC_ATTRIBUTES, MaxVI) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxVI) < offsetof(VIP_NIC_ATTRIBUTES, MaxDescriptorsPerQueue) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxDescriptorsPerQueue) < offsetof(VIP_NIC_ATTRIBUTES, MaxSegmentsPerDesc) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxSegmentsPerDesc) < offsetof(VIP_NIC_ATTRIBUTES, MaxCQ) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxCQ) < offsetof(VIP_NIC_ATTRIBUTES, MaxCQEntries) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxCQEntries) < offsetof(VIP_NIC_ATTRIBUTES, MaxTransferSize) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxTransferSize) < offsetof(VIP_NIC_ATTRIBUTES, NativeMTU) &&
          offsetof(VIP_NIC_ATTRIBUTES, NativeMTU) < offsetof(VIP_NIC_ATTRIBUTES, MaxPtags) &&
          offsetof(VIP_NIC_ATTRIBUTES, MaxPtags) < offsetof(VIP_NIC_ATTRIBUTES, ReliabilityLevelSupport) &&
          offsetof(VIP_NIC_ATTRIBUTES, ReliabilityLevelSupport) < offsetof(VIP_NIC_ATTRIBUTES, RDMAReadSupport));
CHECK(nic_attrs_name, sizeof(((VIP_NIC_ATTRIBUTES *)0)->Name) == 64);
CHECK(nic_attrs_address_len, sizeof(((VIP_NIC_ATTRIBUTES *)0)->NicAddressLen) == 2 &&
                                 sizeof(((VIP_NIC_ATTRIBUTES *)0)->MaxDiscriminatorLen) == 2);
CHECK(vi_attrs_order,
      offsetof(VIP_VI_ATTRIBUTES, ReliabilityLevel) == 0 &&
          offsetof(VIP_VI_ATTRIBUTES, ReliabilityLevel) < offsetof(VIP_VI_ATTRIBUTES, MaxTransferSize) &&
          offsetof(VIP_VI_ATTRIBUTES, MaxTransferSize) < offsetof(VIP_VI_ATTRIBUTES, QoS) &&
          offsetof(VIP_VI_ATTRIBUTES, QoS) < offsetof(VIP_VI_ATTRIBUTES, Ptag) &&
          offsetof(VIP_VI_ATTRIBUTES, Ptag) < offsetof(VIP_VI_ATTRIBUTES, EnableRdmaWrite) &&
          offsetof(VIP_VI_ATTRIBUTES, EnableRdmaWrite) < offsetof(VIP_VI_ATTRIBUTES, EnableRdmaRead));
CHECK(mem_attrs_order, offsetof(VIP_MEM_ATTRIBUTES, Ptag) == 0 &&
                           offsetof(VIP_MEM_ATTRIBUTES, Ptag) < offsetof(VIP_MEM_ATTRIBUTES, EnableRdmaWrite) &&
                           offsetof(VIP_MEM_ATTRIBUTES, EnableRdmaWrite) < offsetof(VIP_MEM_ATTRIBUTES, EnableRdmaRead));
CHECK(error_desc_order,
      offsetof(VIP_ERROR_DESCRIPTOR, NicHandle) == 0 &&
          offsetof(VIP_ERROR_DESCRIPTOR, NicHandle) < offsetof(VIP_ERROR_DESCRIPTOR, ViHandle) &&
          offsetof(VIP_ERROR_DESCRIPTOR, ViHandle) < offsetof(VIP_ERROR_DESCRIPTOR, CQHandle) &&
          offsetof(VIP_ERROR_DESCRIPTOR, CQHandle) < offsetof(VIP_ERROR_DESCRIPTOR, DescriptorPtr) &&
          offsetof(VIP_ERROR_DESCRIPTOR, DescriptorPtr) < offsetof(VIP_ERROR_DESCRIPTOR, OpCode) &&
          offsetof(VIP_ERROR_DESCRIPTOR, OpCode) < offsetof(VIP_ERROR_DESCRIPTOR, ResourceCode) &&
          offsetof(VIP_ERROR_DESCRIPTOR, ResourceCode) < offsetof(VIP_ERROR_DESCRIPTOR, ErrorCode));
CHECK(autodiscovery_order,
      offsetof(VIP_AUTODISCOVERY_LIST, NumberOfHops) == 0 &&
          offsetof(VIP_AUTODISCOVERY_LIST, NumberOfHops) < offsetof(VIP_AUTODISCOVERY_LIST, ADAddrArray) &&
          offsetof(VIP_AUTODISCOVERY_LIST, ADAddrArray) < offsetof(VIP_AUTODISCOVERY_LIST, NumAdAddrs));

/* ---- Prototypes, spelled out from the spec. */
typedef void NotifyViFn(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *);
typedef void NotifyCqFn(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN);
typedef void ErrorFn(VIP_PVOID, VIP_ERROR_DESCRIPTOR *);

typedef VIP_RETURN OpenNicFn(const VIP_CHAR *, VIP_NIC_HANDLE *);
typedef VIP_RETURN CloseNicFn(VIP_NIC_HANDLE);
typedef VIP_RETURN QueryNicFn(VIP_NIC_HANDLE, VIP_NIC_ATTRIBUTES *);
typedef VIP_RETURN RegisterMemFn(VIP_NIC_HANDLE, VIP_PVOID, VIP_ULONG, VIP_MEM_ATTRIBUTES *, VIP_MEM_HANDLE *);
typedef VIP_RETURN DeregisterMemFn(VIP_NIC_HANDLE, VIP_PVOID, VIP_MEM_HANDLE);
typedef VIP_RETURN MemAttrsFn(VIP_NIC_HANDLE, VIP_PVOID, VIP_MEM_HANDLE, VIP_MEM_ATTRIBUTES *);
typedef VIP_RETURN CreatePtagFn(VIP_NIC_HANDLE, VIP_PROTECTION_HANDLE *);
typedef VIP_RETURN DestroyPtagFn(VIP_NIC_HANDLE, VIP_PROTECTION_HANDLE);
typedef VIP_RETURN CreateViFn(VIP_NIC_HANDLE, VIP_VI_ATTRIBUTES *, VIP_CQ_HANDLE, VIP_CQ_HANDLE, VIP_VI_HANDLE *);
typedef VIP_RETURN ViFn(VIP_VI_HANDLE);
typedef VIP_RETURN QueryViFn(VIP_VI_HANDLE, VIP_VI_STATE *, VIP_VI_ATTRIBUTES *, VIP_BOOLEAN *, VIP_BOOLEAN *);
typedef VIP_RETURN SetViAttrsFn(VIP_VI_HANDLE, VIP_VI_ATTRIBUTES *);
typedef VIP_RETURN PostFn(VIP_VI_HANDLE, VIP_DESCRIPTOR *, VIP_MEM_HANDLE);
typedef VIP_RETURN DoneFn(VIP_VI_HANDLE, VIP_DESCRIPTOR **);
typedef VIP_RETURN WaitFn(VIP_VI_HANDLE, VIP_ULONG, VIP_DESCRIPTOR **);
typedef VIP_RETURN NotifyFn(VIP_VI_HANDLE, VIP_PVOID, void (*)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *));
typedef VIP_RETURN ConnectWaitFn(VIP_NIC_HANDLE, VIP_NET_ADDRESS *, VIP_ULONG, VIP_NET_ADDRESS *, VIP_VI_ATTRIBUTES *,
                                 VIP_CONN_HANDLE *);
typedef VIP_RETURN ConnectAcceptFn(VIP_CONN_HANDLE, VIP_VI_HANDLE);
typedef VIP_RETURN ConnectRejectFn(VIP_CONN_HANDLE);
typedef VIP_RETURN ConnectRequestFn(VIP_VI_HANDLE, VIP_NET_ADDRESS *, VIP_NET_ADDRESS *, VIP_ULONG,
                                    VIP_VI_ATTRIBUTES *);
typedef VIP_RETURN PeerRequestFn(VIP_VI_HANDLE, VIP_NET_ADDRESS *, VIP_NET_ADDRESS *, VIP_ULONG);
typedef VIP_RETURN PeerDoneFn(VIP_VI_HANDLE, VIP_VI_ATTRIBUTES *);
typedef VIP_RETURN CreateCqFn(VIP_NIC_HANDLE, VIP_ULONG, VIP_CQ_HANDLE *);
typedef VIP_RETURN DestroyCqFn(VIP_CQ_HANDLE);
typedef VIP_RETURN ResizeCqFn(VIP_CQ_HANDLE, VIP_ULONG);
typedef VIP_RETURN CqDoneFn(VIP_CQ_HANDLE, VIP_VI_HANDLE *, VIP_BOOLEAN *);
typedef VIP_RETURN CqWaitFn(VIP_CQ_HANDLE, VIP_ULONG, VIP_VI_HANDLE *, VIP_BOOLEAN *);
typedef VIP_RETURN CqNotifyFn(VIP_CQ_HANDLE, VIP_PVOID, void (*)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN));
typedef VIP_RETURN ErrorCallbackFn(VIP_NIC_HANDLE, VIP_PVOID, void (*)(VIP_PVOID, VIP_ERROR_DESCRIPTOR *));
typedef VIP_RETURN QuerySmiFn(VIP_NIC_HANDLE, VIP_ULONG, VIP_PVOID);
typedef VIP_RETURN NsInitFn(VIP_NIC_HANDLE, VIP_PVOID);
typedef VIP_RETURN NsByNameFn(VIP_NIC_HANDLE, VIP_CHAR *, VIP_NET_ADDRESS *, VIP_ULONG);
typedef VIP_RETURN NsByAddrFn(VIP_NIC_HANDLE, VIP_NET_ADDRESS *, VIP_CHAR *, VIP_ULONG *);
typedef VIP_RETURN NsShutdownFn(VIP_NIC_HANDLE);

/* A redeclaration whose type conflicts with vipl.h's is an error in C. */
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

/* Callbacks as a program writes them. */
static void on_vi(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d) {
  (void)ctx, (void)nic, (void)vi, (void)d;
}
static void on_cq(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_BOOLEAN recv) {
  (void)ctx, (void)nic, (void)vi, (void)recv;
}
static void on_error(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *e) { (void)ctx, (void)e; }

/* The operand of sizeof is not evaluated: the assignment is type-checked
 * (an incompatible pointer is a diagnostic, so an error under -Werror) but
 * no reference to the function reaches the object file. */
#define TAKE(type, fn)            \
  do {                            \
    type *p_;                     \
    (void)sizeof(p_ = &fn);       \
  } while (0)

static int check_addresses(void) {
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
  /* Program callbacks fit the parameters, and the cLAN typedef names match. */
  {
    NotifyViFn *vi_cb = on_vi;
    NotifyCqFn *cq_cb = on_cq;
    ErrorFn *err_cb = on_error;
    VIP_VI_CALLBACK vi_named = vi_cb;
    VIP_CQ_CALLBACK cq_named = cq_cb;
    VIP_ERROR_HANDLER err_named = err_cb;
    return vi_named != 0 && cq_named != 0 && err_named != 0 ? 0 : 1;
  }
}

/* The VIP_ types are the fixed-width ones (pointers to incompatible types
 * do not convert silently). */
static int check_underlying_types(void) {
  uint8_t u8 = 0;
  uint16_t u16 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  unsigned long ul = 0;
  char c = 0;
  int i = 0;
  VIP_UINT8 *p8 = &u8;
  VIP_UINT16 *p16 = &u16;
  VIP_UINT32 *p32 = &u32;
  VIP_UINT64 *p64 = &u64;
  VIP_ULONG *pul = &ul;
  VIP_CHAR *pc = &c;
  VIP_BOOLEAN *pb = &i;
  VIP_MEM_HANDLE *pmh = &u32;
  VIP_RELIABILITY_LEVEL *prl = &u16;
  void **pv = 0;
  VIP_PVOID *ppv = pv;
  VIP_NIC_HANDLE *pnic = pv;
  VIP_VI_HANDLE *pvi = pv;
  VIP_CQ_HANDLE *pcq = pv;
  VIP_PROTECTION_HANDLE *ptag = pv;
  VIP_CONN_HANDLE *pconn = pv;
  VIP_QOS *pqos = pv;
  VIP_EVENT_HANDLE *pev = pv;
  return (*p8 + *p16 + *p32 + *p64 + *pul + *pc + *pb + *pmh + *prl) == 0 && ppv == pnic && pvi == pcq &&
                 ptag == pconn && pqos == pev
             ? 0
             : 1;
}

/* Every structure and enum type, filled as a program would. */
static int check_structures(void) {
  union {
    VIP_NET_ADDRESS a;
    VIP_UINT8 bytes[sizeof(VIP_NET_ADDRESS) + 2 + 8];
  } addr;
  VIP_NIC_ATTRIBUTES nic_attrs;
  VIP_MEM_ATTRIBUTES mem_attrs;
  VIP_VI_ATTRIBUTES vi_attrs;
  VIP_VI_STATE state = VIP_STATE_IDLE;
  VIP_DESCRIPTOR desc;
  VIP_CONTROL_SEGMENT *cs = &desc.CS;
  VIP_ADDRESS_SEGMENT *remote = &desc.DS[0].Remote;
  VIP_DATA_SEGMENT *local = &desc.DS[1].Local;
  VIP_DESCRIPTOR_SEGMENT *seg = &desc.DS[0];
  VIP_PVOID64 where;
  VIP_ERROR_DESCRIPTOR err;
  VIP_RESOURCE_CODE resource = VIP_RESOURCE_DESCRIPTOR;
  VIP_ERROR_CODE code = VIP_ERROR_CATASTROPHIC;
  VIP_AUTODISCOVERY_LIST list;
  VIP_NET_ADDRESS *found[1];
  VIP_RETURN rc = VIP_SUCCESS;
  VIP_UCHAR uc = 1;
  VIP_USHORT us = 2;
  VIP_SHORT ss = -3;
  VIP_LONG sl = -4;
  static char buf[16];

  addr.a.HostAddressLen = 2;
  addr.a.DiscriminatorLen = 8;
  addr.a.HostAddress[0] = 3; /* node 3, little-endian */
  addr.bytes[offsetof(VIP_NET_ADDRESS, HostAddress) + 1] = 0;

  nic_attrs.Name[0] = 'n';
  nic_attrs.HardwareVersion = nic_attrs.ProviderVersion = 1;
  nic_attrs.NicAddressLen = 2;
  nic_attrs.LocalNicAddress = addr.a.HostAddress;
  nic_attrs.ThreadSafe = VIP_TRUE;
  nic_attrs.MaxDiscriminatorLen = 16;
  nic_attrs.MaxRegisterBytes = nic_attrs.MaxRegisterRegions = nic_attrs.MaxRegisterBlockBytes = 1;
  nic_attrs.MaxVI = nic_attrs.MaxDescriptorsPerQueue = nic_attrs.MaxSegmentsPerDesc = 1;
  nic_attrs.MaxCQ = nic_attrs.MaxCQEntries = nic_attrs.MaxTransferSize = 1;
  nic_attrs.NativeMTU = nic_attrs.MaxPtags = 1;
  nic_attrs.ReliabilityLevelSupport = VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY;
  nic_attrs.RDMAReadSupport = VIP_SERVICE_RELIABLE_DELIVERY;

  mem_attrs.Ptag = 0;
  mem_attrs.EnableRdmaWrite = VIP_TRUE;
  mem_attrs.EnableRdmaRead = VIP_FALSE;

  vi_attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  vi_attrs.MaxTransferSize = nic_attrs.MaxTransferSize;
  vi_attrs.QoS = 0;
  vi_attrs.Ptag = mem_attrs.Ptag;
  vi_attrs.EnableRdmaWrite = VIP_TRUE;
  vi_attrs.EnableRdmaRead = VIP_FALSE;

  where.AddressBits = 0;
  where.Address = buf;
  cs->Next = where;
  cs->NextHandle = 0;
  cs->SegCount = 2;
  cs->Control = VIP_CONTROL_OP_RDMAWRITE | VIP_CONTROL_IMMEDIATE;
  cs->Reserved = 0;
  cs->ImmediateData = 0xABCD;
  cs->Length = sizeof buf;
  cs->Status = 0;
  remote->Data.AddressBits = 0x1000;
  remote->Handle = 7;
  remote->Reserved = 0;
  local->Data.Address = buf;
  local->Handle = 9;
  local->Length = sizeof buf;

  err.NicHandle = err.ViHandle = err.CQHandle = 0;
  err.DescriptorPtr = &desc;
  err.OpCode = VIP_CONTROL_OP_SENDRECV;
  err.ResourceCode = resource;
  err.ErrorCode = code;

  found[0] = &addr.a;
  list.NumberOfHops = 1;
  list.ADAddrArray = found;
  list.NumAdAddrs = 1;

  return (addr.a.HostAddress[0] == 3 && state == VIP_STATE_IDLE && seg->Remote.Handle == 7 &&
          desc.DS[1].Local.Length == sizeof buf && err.DescriptorPtr->CS.ImmediateData == 0xABCD &&
          list.ADAddrArray[0]->HostAddressLen == 2 && rc == VIP_SUCCESS && uc + us + ss + sl == -4 &&
          vi_attrs.EnableRdmaWrite == VIP_TRUE)
             ? 0
             : 1;
}

int main(void) {
  return check_addresses() | check_underlying_types() | check_structures();
}

"""A LANai-era cost model: the firmware's exact instruction counts plus the bytes a message moves -> modelled time on
a Myrinet NIC of the papers' generation (issue 22). Used by tests/bench/papers.py; documented in docs/papers.md.

The counts come from the cost plugin (tests/bench/cost.py: the instructions each NIC retires per message and side,
deterministic). The model charges them at the modelled NIC's clock and adds what the bytes cost on its buses:

  NIC time of n instructions     t_nic(n)  = n * cpi / clock
  a DMA of b bytes (host <-> NIC) t_dma(b)  = dma_start + b / dma_rate
  a packet of b bytes on the link t_link(b) = link_start + (b + header) / link_rate
  a host write of b bytes to NIC  t_pio(b)  = b / pio_rate           (a descriptor; a short message carried inline)

One-way latency of a one-packet message of S bytes (the send side's and the receive side's counts, taken at the
same path: inline for a VMMC message <= 128 B, fetched by DMA above):

  t_pio(descriptor [+ S if inline]) + t_nic(send) [+ t_dma(S) if fetched] + t_link(S) + t_nic(recv) + t_dma(S)

The host's instructions are charged apart, at the paper's host clock: t_host(n) = n * host_cpi / host_mhz, with n
the library's instructions per send call (tests/bench/host_cost.py, callgrind): the modelled o_s. The host's notice
of a completion is not modelled (it polls memory the NIC's DMA wrote, as the papers' hosts did); nor are
retransmissions or ACKs (ack/ring phases: cost.py reports them apart,
as they depend on timing). A message of several packets streams: the packets overlap in a pipeline of the sender's
NIC, its host DMA, the link, the receiver's NIC and its host DMA (a LANai's DMA engines run beside its processor),
so after the first packet every further one costs the slowest stage:

  T(S) = latency(first packet) + (packets - 1) * max(t_nic(send), t_dma(p), t_link(p), t_nic(recv))

with p = MTU bytes and the per-packet counts those of a full one-packet (4096 B) message: an upper bound, as a
packet in the middle of a long message skips the per-message work. Bandwidth(S) = S / T(S).

Presets: the papers' NICs (PRESETS below). A parameter's source is beside it (tests/bench/published.py HARDWARE
where a paper or data sheet states it); those no source at hand states are marked `assumed`, with the reason.
"""
import math

MTU = 4096          # payload bytes per packet (shared/include/ulnic/abi/fabric.h kMtu)
HEADER = 64         # bytes of packet header on the wire (fabric.h Packet: 64 + payload)
DESCRIPTOR = 64     # bytes of a send-queue entry the host writes to the NIC
INLINE_MAX = 128    # a VMMC message up to this many bytes rides in the send queue (inline), as in the VMMC paper


# The presets. Each parameter: (value, where it comes from). "assumed" marks a value no source at hand states
# (the papers' full texts were not reachable when these were set: tests/bench/published.py says what was found);
# change them here, and every modelled figure follows.
PRESETS = {
    "lanai4": {
        "label": "LANai 4.x on 32-bit/33 MHz PCI, 1.28 Gb/s Myrinet (the VMMC paper's NIC)",
        "clock_mhz": (33.0, "published.HARDWARE lanai4.clock_mhz (secondary: the LANai ran at the PCI clock)"),
        "cpi": (1.0, "assumed: a LANai issues about one instruction per cycle when not stalled (unconfirmed); "
                     "loads that stall make the model optimistic"),
        "dma_mbps": (108.4 / 0.98, "derived: the VMMC paper's 108.4 MB/s peak is 98% of the hardware bandwidth "
                                   "(published.PUBLISHED vmmc)"),
        "dma_start_us": (1.0, "assumed: a host DMA's setup (descriptor, PCI arbitration)"),
        "link_mbps": (160.0, "published.HARDWARE lanai4.link_gbps: 1.28 Gb/s per connection, taken per direction"),
        "link_start_us": (0.5, "published.HARDWARE lanai7.myrinet2000_hw_latency_us: one switch, port to port "
                               "(a later generation's figure, used for both)"),
        "pio_mbps": (66.0, "assumed: host writes to NIC SRAM, half the 132 MB/s PCI peak (single posted words)"),
        "host_mhz": (166.0, "published.SOURCES vmmc hardware: 166 MHz Pentium PCs"),
        "host_cpi": (1.0, "assumed: one instruction per cycle on the host (the Pentium issues up to two)"),
    },
    "lanai7": {
        "label": "LANai 7 on 64-bit/33 MHz PCI, 1.28 Gb/s Myrinet (the VIA paper's era)",
        "clock_mhz": (66.0, "assumed: LANai 7 at 66 MHz (unconfirmed: published.HARDWARE lanai7.clock_mhz)"),
        "cpi": (1.0, "assumed, as lanai4"),
        "dma_mbps": (264.0, "published.HARDWARE lanai7.host_bus_peak_mbps: 64-bit/33 MHz PCI peak (which bus the "
                            "VIA testbed had is not known)"),
        "dma_start_us": (0.5, "assumed: half lanai4's, at twice the clock"),
        "link_mbps": (160.0, "assumed: 1.28 Gb/s Myrinet per direction (the paper's link rate was not found)"),
        "link_start_us": (0.5, "published.HARDWARE lanai7.myrinet2000_hw_latency_us"),
        "pio_mbps": (132.0, "assumed: half the 264 MB/s bus peak"),
        "host_mhz": (550.0, "published.SOURCES via hardware: 550 MHz Pentium III SMPs"),
        "host_cpi": (1.0, "assumed, as lanai4"),
    },
}
PARAMS = ("clock_mhz", "cpi", "dma_mbps", "dma_start_us", "link_mbps", "link_start_us", "pio_mbps", "host_mhz",
          "host_cpi")


def preset(name):
    """Preset `name` -> {param: float, "name", "label", "sources": {param: where}}."""
    hw = PRESETS[name]
    p = {k: float(hw[k][0]) for k in PARAMS}
    p["name"], p["label"] = name, hw["label"]
    p["sources"] = {k: hw[k][1] for k in PARAMS}
    return p


def t_nic(insns, p):
    return insns * p["cpi"] / p["clock_mhz"]  # MHz: instructions per us


def t_host(insns, p):
    """The paper's host running n of the library's instructions (host_cost.py counts them with callgrind)."""
    return insns * p["host_cpi"] / p["host_mhz"]


def t_dma(b, p):
    return p["dma_start_us"] + b / p["dma_mbps"]  # MB/s = bytes per us


def t_link(b, p):
    return p["link_start_us"] + (b + HEADER) / p["link_mbps"]


def t_pio(b, p):
    return b / p["pio_mbps"]


def oneway_us(size, send_insns, recv_insns, p, inline):
    """Modelled one-way latency of one packet of `size` bytes; inline: the host writes the payload with the
    descriptor (no fetch by DMA)."""
    post = t_pio(DESCRIPTOR + (size if inline else 0), p)
    fetch = 0.0 if inline else t_dma(size, p)
    return post + t_nic(send_insns, p) + fetch + t_link(size, p) + t_nic(recv_insns, p) + t_dma(size, p)


def stream_us(size, first, packet, p):
    """Modelled time of a message of `size` bytes: `first` = (send, recv) counts of its first packet's path (the
    path a message of min(size, MTU) bytes takes), `packet` = (send, recv) counts of a full packet."""
    n = max(1, math.ceil(size / MTU))
    head = min(size, MTU)
    t = oneway_us(head, first[0], first[1], p, inline=size <= INLINE_MAX)
    if n > 1:
        stage = max(t_nic(packet[0], p), t_dma(MTU, p), t_link(MTU, p), t_nic(packet[1], p))
        t += (n - 1) * stage
    return t


def bandwidth_mbps(size, first, packet, p):
    return size / stream_us(size, first, packet, p)


def n_half(first, packet, p, sizes):
    """The smallest of `sizes` at which the modelled bandwidth reaches half of its value at the largest size."""
    peak = bandwidth_mbps(max(sizes), first, packet, p)
    for s in sorted(sizes):
        if bandwidth_mbps(s, first, packet, p) >= peak / 2:
            return s
    return None

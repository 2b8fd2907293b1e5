"""Published values of the seed papers, with their sources (for tests/bench/papers.py).

Every number below was found in a source during one of two search sessions (stored
public web pages: abstracts, project pages, product pages, posters, slides). The
second pass looked for the papers' full texts and for secondary sources quoting
their tables; the stored page copies it could reach hold only page beginnings
(abstracts, title pages), so the tables/figures stayed out of reach. Values added
in the second pass are marked "2nd pass" in their note. Where the
source is an abstract, a poster, a later release or a third party, the `note`
says so. Where nothing was found the value is None and the note says why.
"unconfirmed: ..." notes record what the team remembers but could not verify;
they are NOT published values and must not be printed as such.

Entry shape:  {"value", "unit", "what", "where", "note"}
`where` names the SOURCES key (or URL) and the part of it the value comes from.
Ranges are given as (low, high) tuples.
"""

SOURCES = {
    "via": {
        "cite": "A. Begel, P. Buonadonna, D. E. Culler, D. Gay. An analysis of VI "
                "Architecture primitives in support of parallel and distributed "
                "communication. Concurrency and Computation: Practice and Experience, 2002.",
        "url": "https://sciweavers.org/node/284673",
        "url_alt": "https://staging.scite.ai/reports/smart-cluster-network-scnet-design-YwzxpG",
        "found": "abstract only (full abstract text on the scite page); tables/figures not found. "
                 "2nd pass: full text still not reachable (sciweavers/scilit/isc.ac copies are "
                 "abstract-only); the companion SC98 paper (Buonadonna, Geweke, Culler, 'An "
                 "Implementation and Analysis of the Virtual Interface Architecture') was found "
                 "as abstract only (no numbers). One secondary number for Berkeley VIA itself: "
                 "M. Welsh, Jaguar talk slides 1999 (see via.secondary.* entries)",
        "hardware": "four-way 550 MHz Pentium III SMPs with the Myrinet network (abstract). "
                    "LANai version/clock, PCI width/clock and the VIA implementation were "
                    "not found.",
    },
    "vmmc": {
        "cite": "C. Dubnicki, A. Bilas, K. Li, J. Philbin. Design and Implementation of "
                "Virtual Memory-Mapped Communication on Myrinet. Proc. 11th IPPS, "
                "April 1997, pp. 388-396 (also Princeton TR-570-97, Jan 1997).",
        "url": "http://www.cs.princeton.edu/research/techreps/TR-570-97",
        "url_poster": "http://www-csag.ucsd.edu/individual/achien/asplos/posters/vmmc.txt",
        "found": "abstract (TR page, Princeton 'collaborate' page) and an earlier ASPLOS "
                 "poster abstract by the same authors; paper body not found. 2nd pass: only "
                 "the same abstract again (hinet.lindayi.me copy); no secondary source quoting "
                 "the figures was reachable",
        "hardware": "4-node system of 166 MHz Pentium PCs, each with a Myrinet PCI network "
                    "interface, connected to a Myrinet switch; 1.28 Gb/s per connection "
                    "(poster). LANai version/clock not stated in the found text.",
    },
    "vmmc2": {
        "cite": "C. Dubnicki, A. Bilas, Y. Chen, S. Damianakis, K. Li. VMMC-2: Efficient "
                "Support for Reliable, Connection-Oriented Communication. Hot "
                "Interconnects V, 1997 (update in IEEE Micro 18(1), 1998).",
        "url": "http://shrimp.cs.princeton.edu/html/vmmc-ii.html",
        "found": "project page abstract",
        "hardware": "PCs connected with Myrinet (page does not give CPU or LANai details).",
    },
    "fm": {
        "cite": "M. Lauria, S. Pakin, A. A. Chien. Efficient Layering for High Speed "
                "Communication: Fast Messages 2.x. Proc. HPDC-7, 1998 "
                "(doi 10.1109/HPDC.1998.709943).",
        "url": "https://citegraph.io/paper/53e99c21b7602d97024d0d47",
        "url_alt": "https://scilit.com/publications/a84194a7b8d55d65964b42069a5d6a0f",
        "related": "S. Pakin, V. Karamcheti, A. A. Chien. Fast Messages: Efficient, Portable "
                   "Communication for Workstation Clusters and MPPs. IEEE Concurrency 5(2), "
                   "1997, pp. 60-72 (abstract only found: Cray T3D and Myrinet cluster "
                   "implementations, no numbers).",
        "secondary": "CSAG FM project page http://www-csag.ucsd.edu/projects/comm/fm.html "
                     "(updated Aug 1999); HPVM 1.9 docs "
                     "http://www-csag.ucsd.edu/projects/hpvm/doc/hpvmdoc_3.html",
        "found": "abstract only; tables/figures not found. 2nd pass: only the abstract again "
                 "(scilit, hinet.lindayi.me); MPI-FM (JPDC 1997) found as abstract/summary only "
                 "(SPARCstation 20/71 + Myrinet, FM 1.x era; no numbers in the text seen); HPVM "
                 "1.9 per-API latency/bandwidth list is cut off in the stored copy",
        "hardware": "Myrinet (abstract). Host CPU, LANai version/clock and bus not found.",
    },
    "amudp": {
        "cite": "D. Bonachea, D. Hettena. AMUDP: Active Messages over UDP. UC Berkeley "
                "project report/web document; AMUDP is part of GASNet.",
        "url": "https://gasnet.lbl.gov/amudp/",
        "url_alt": "https://github.com/BerkeleyLab/gasnet/blob/master/other/amudp/README",
        "found": "project page introduction and README (design goals only); no performance "
                 "numbers found. 2nd pass: same; the GASNet other/amudp sources hold no "
                 "measurements",
        "hardware": "any POSIX system with UDP/IP sockets; no measured platform found.",
    },
    "unet": {
        "cite": "T. von Eicken, A. Basu, V. Buch, W. Vogels. U-Net: A User-Level Network "
                "Interface for Parallel and Distributed Computing. Proc. 15th SOSP, "
                "Dec 1995 (ACM SIGOPS OSR 29(5)).",
        "url": "https://fdocuments.in/document/u-net-a-user-level-network-interface-for-parallel-and-alcoldcomp520papersu-net.html",
        "url_alt": "https://deepdyve.com/export-to-EndNote?fmt=ris&p=D4oeda0QXe",
        "found": "abstract and introduction only; the evaluation section was not reachable. "
                 "2nd pass: same (fdocuments, deepdyve, paperexplained copies all stop at the "
                 "introduction); a later paper by the same group (Welsh, Basu, von Eicken, 'ATM "
                 "and Fast Ethernet Network Interfaces for User-level Communication', HPCA-3, "
                 "Feb 1997) gives round trips in its abstract (see unet.hpca97.* entries)",
        "hardware": "8-node ATM cluster of standard workstations (abstract). The U-Net home "
                    "page (https://www.cs.cornell.edu/tve/u-net/Default.html) lists "
                    "SPARCstation 10/20 + FORE SBA-200 (SunOS 4.1.x / Solaris 2.x), Linux PCs "
                    "with DC21140 Fast Ethernet or FORE PCA-200, NT PCs with DC21140.",
    },
    "unet_mm": {
        "cite": "M. Welsh, A. Basu, T. von Eicken. Incorporating Memory Management into "
                "User-Level Network Interfaces. Cornell TR 97-1620, Feb 1997 (Hot "
                "Interconnects V, 1997); journal version: M. Welsh, A. Basu, X. W. Huang, "
                "T. von Eicken, Memory Management for User-Level Network Interfaces, "
                "IEEE Micro 1998.",
        "url": "https://ecommons.cornell.edu/handle/1813/7275",
        "url_poster": "http://www-csag.ucsd.edu/individual/achien/asplos/posters/unet-vmm.txt",
        "found": "abstract and an ASPLOS poster abstract (Basu, Welsh, von Eicken); no numbers. "
                 "2nd pass: eCommons TR page (abstract), IEEE Micro 1998 abstract (isc.ac, "
                 "hinet.lindayi.me) and a one-line summary "
                 "(carlstrom.com/stanford/quals mirror, unetmm.html): still no numbers",
        "hardware": "FORE Systems PCA-200 PCI ATM interface in Pentium workstations running "
                    "Linux (poster); the TR says two implementations were built.",
    },
    "myricom": {
        "cite": "Myricom product/spec pages (M2L-PCI64A/B, PCI64B/C spec, Myrinet-2000 "
                "performance page) and the original Myrinet link specification.",
        "url": "http://www.myri.com/myrinet/PCI64/m2l-pci64a.html",
        "url_alt": "http://www.myricom.com/scs/performance/Myrinet-2000/",
    },
}


def _v(value, unit, what, where, note=""):
    return {"value": value, "unit": unit, "what": what, "where": where, "note": note}


_NF = "not found: only the abstract of this paper was reachable in this session"

# second-pass secondary sources (see the notes of the entries that use them)
_WELSH_SLIDE = ("M. Welsh, Jaguar talk slides (Java Grande/Maryland 1999), slide 'One Scenario: "
                "\"Java VIA\"?' (https://infomall.org/sites/dsc/storage1/c3/shared/project/fox/"
                "new-npac/foxport3backup1/Maryland/documentsmaryland99/Foils99/admi/jgacm/Source/"
                "slides/d1-welsh/mgp00016.txt)")
_HPCA97 = ("M. Welsh, A. Basu, T. von Eicken, 'ATM and Fast Ethernet Network Interfaces for "
           "User-level Communication', HPCA-3, Feb 1997, pp. 332-342: abstract "
           "(https://manuscript.isc.ac/Inventory/49/2271678.htm)")

PUBLISHED = {
    "via": {
        "raw_vi.rtt_half": _v(None, "us", "raw VI one-way (RTT/2), smallest message", "-", _NF),
        "raw_vi.os": _v(None, "us", "raw VI send overhead (LogP o_s)", "-", _NF),
        "raw_vi.or": _v(None, "us", "raw VI receive overhead (LogP o_r)", "-", _NF),
        "raw_vi.g": _v(None, "us", "raw VI gap (LogP g)", "-", _NF),
        "raw_vi.L": _v(None, "us", "raw VI latency (LogP L)", "-", _NF),
        "am_vi.rtt_half": _v(None, "us", "AM over VI one-way (RTT/2)", "-", _NF),
        "am_vi.os": _v(None, "us", "AM over VI send overhead", "-", _NF),
        "am_vi.or": _v(None, "us", "AM over VI receive overhead", "-", _NF),
        "am_vi.g": _v(None, "us", "AM over VI gap", "-", _NF),
        "am_vi.L": _v(None, "us", "AM over VI latency", "-", _NF),
        "delta": _v(5.4, "us",
                    "minimum mapping cost: host processing to map AM (and Split-C) onto VI "
                    "primitives",
                    "via: abstract",
                    "confirmed from the abstract; it says the same 5.4 us holds for both "
                    "Active Messages and Split-C. Whether it is per message, per round trip "
                    "or summed o_s+o_r is not stated in the abstract."),
        "bulk.peak_mbps": _v(44, "MB/s",
                             "bulk transfer plateau, both AM and Split-C over VI",
                             "via: abstract",
                             "abstract says the plateau is due to added fragmentation "
                             "requirements; raw-VI peak not given in the abstract"),
        "bulk.plateau_bytes": _v(None, "bytes", "message size where bulk bandwidth plateaus",
                                 "-", _NF),
        "event_notification_share": _v(None, "fraction",
                                       "share of overhead spent in event notification",
                                       "via: abstract (qualitative only)",
                                       "abstract identifies the completion queue as the source "
                                       "of the highest overhead, without a percentage. "
                                       "unconfirmed: 45% (team recollection)"),
        "breakdown": _v(None, "host/NIC cycles per phase",
                        "per-phase breakdown (Tables 3-4)", "-", _NF),
        "secondary.bvia_rtt_us": _v(70, "us",
                                    "UC Berkeley VIA round trip from C (raw VI, small message)",
                                    _WELSH_SLIDE,
                                    "2nd pass. SECONDARY: a talk slide, not the Begel et al. paper; "
                                    "it says Berkeley VIA over Myrinet on Linux and NT, '70 usec "
                                    "round-trip'; message size, host CPU and LANai version not "
                                    "stated, so it need not match the paper's 550 MHz PIII testbed. "
                                    "Do not use as raw_vi.rtt_half (that would be 35 us only by "
                                    "halving an unrelated setup's number)"),
        "secondary.bvia_peak_mbits": _v(488, "Mbit/s",
                                        "UC Berkeley VIA peak bandwidth from C",
                                        _WELSH_SLIDE,
                                        "2nd pass. SECONDARY (same slide); stated as '488+ Mbit/sec' "
                                        "(a lower bound, ~61 MB/s); hardware not stated; not the "
                                        "paper's bulk number (44 MB/s is AM/Split-C over VI)"),
    },
    "vmmc": {
        "oneway_latency_short_us": _v(9.8, "us", "one-way user-to-user latency, smallest message",
                                      "vmmc: abstract (IPPS'97 / TR-570-97)",
                                      "size not given in the abstract; the earlier ASPLOS poster "
                                      "abstract says 'about 9.9 us' for one-word transfers"),
        "oneway_latency_short_bytes": _v(None, "bytes", "message size of the latency above",
                                         "vmmc poster",
                                         "poster says 'one word' (not given in bytes; 4 B on "
                                         "the 32-bit Pentium host is an inference, not stated)"),
        "latency_at": _v(None, "us", "latency at other message sizes", "-",
                         "not found (figure not reachable)"),
        "bandwidth_peak_mbps": _v(108.4, "MB/s", "maximum user-to-user bandwidth (one-way)",
                                  "vmmc: abstract", "poster gives 108 MB/s"),
        "bandwidth_hw_fraction": _v(0.98, "fraction",
                                    "peak bandwidth as a fraction of the hardware bandwidth",
                                    "vmmc poster (ASPLOS poster abstract, same authors)",
                                    "poster: 108 MB/s 'is about 98% of the hardware bandwidth'; "
                                    "the poster predates the IPPS paper"),
        "bandwidth_hw_limit_mbps": _v(None, "MB/s",
                                      "the hardware (DMA/bus) limit that fraction refers to",
                                      "-",
                                      "not stated in the found text; 108/0.98 ~ 110 MB/s is a "
                                      "derivation, not a published number"),
        "bandwidth_bidir_mbps": _v(None, "MB/s", "bidirectional bandwidth", "-", _NF),
        "half_peak_bytes": _v(None, "bytes", "message size at half of peak bandwidth", "-", _NF),
        "send_overhead_us": _v(None, "us", "host overhead of a send", "-", _NF),
        "short_message_limit_bytes": _v(None, "bytes", "short-message path limit", "-",
                                        _NF + ". unconfirmed: 128 B (team recollection)"),
        "vmmc2.oneway_latency_us": _v(13.5, "us",
                                      "VMMC-2 one-way latency with transfer redirection and "
                                      "retransmission",
                                      "vmmc2: project page abstract", ""),
        "vmmc2.bandwidth_peak_mbps": _v(90, "MB/s", "VMMC-2 maximum bandwidth",
                                        "vmmc2: project page abstract",
                                        "stated as 'over 90 MBytes/s' (lower bound)"),
        "vmmc2.sockets_latency_us": _v(20, "us", "stream sockets over VMMC-2, one-way latency",
                                       "vmmc2: project page abstract", ""),
        "vmmc2.sockets_bandwidth_mbps": _v(84, "MB/s", "stream sockets over VMMC-2, bandwidth",
                                           "vmmc2: project page abstract",
                                           "stated as 'over 84 MBytes/s' (lower bound)"),
    },
    "fm": {
        "latency_min_us": _v(None, "us", "FM 2.x one-way latency, smallest message", "-", _NF),
        "bandwidth_peak_mbps": _v(70, "MB/s", "FM 2.x peak bandwidth",
                                  "fm: abstract",
                                  "abstract: absolute bandwidth 'increased nearly fourfold to "
                                  "70 MB/s' (vs FM 1.x)"),
        "n_half_bytes": _v(None, "bytes", "FM 2.x half-power message size", "-", _NF),
        "mpi.latency_min_us": _v(None, "us", "MPI-FM one-way latency", "-", _NF),
        "mpi.bandwidth_peak_mbps": _v(None, "MB/s", "MPI-FM peak bandwidth", "-",
                                      _NF + " (0.7-0.9 x 70 MB/s would be a derivation)"),
        "mpi.share_of_fm": _v((0.70, 0.90), "fraction",
                              "share of FM 2.x bandwidth delivered to higher-level APIs such as MPI",
                              "fm: abstract", "abstract gives the range 70-90%"),
        "fm1.mpi.share_of_fm": _v(0.20, "fraction",
                                  "share of FM 1.x bandwidth delivered to MPI layered on FM 1.x",
                                  "fm: abstract", "abstract: 'only about 20%'"),
        "csag.bw_at_256B_mbps": _v(43, "MB/s", "FM bandwidth at 256-byte messages",
                                   "fm secondary: CSAG FM project page (Aug 1999)",
                                   "secondary; FM version and hardware not stated; not the "
                                   "HPDC'98 paper's number"),
        "hpvm19.oneway_latency_us": _v(9, "us", "HPVM 1.9 one-way latency (upper bound)",
                                       "fm secondary: HPVM 1.9 docs, 'Project objectives'",
                                       "stated as '< 9 usec'; later release (Pentium II, NT, "
                                       "Myrinet), not the paper"),
        "hpvm19.bandwidth_mbps": _v(100, "MB/s", "HPVM 1.9 bandwidth (lower bound)",
                                    "fm secondary: HPVM 1.9 docs",
                                    "stated as '> 100 MBytes/sec ... even for small packets "
                                    "(< 256 bytes)'; later release, not the paper"),
    },
    "amudp": {
        "rtt_us": _v(None, "us", "small request/reply round trip", "-",
                     "no AMUDP performance numbers found (project page and README give design "
                     "goals only; they say latency is not expected to compete with native AM)"),
        "throughput_msgs_per_s": _v(None, "msgs/s", "small-message throughput", "-", "not found"),
        "bulk_peak_mbps": _v(None, "MB/s", "bulk bandwidth", "-", "not found"),
        "latency_vs_drop": _v(None, "us", "latency vs packet drop rate", "-", "not found"),
        "latency_vs_depth": _v(None, "us", "latency vs queue depth", "-", "not found"),
    },
    "unet": {
        "rtt_us": _v(65, "us", "U-Net round-trip latency (ATM, base level)",
                     "unet: abstract",
                     "message size not given in the abstract. unconfirmed: single-cell "
                     "messages (team recollection)"),
        "rtt_bytes": _v(None, "bytes", "message size of the RTT above", "-",
                        "not found (evaluation section not reachable)"),
        "bandwidth_peak_mbps": _v(15, "MB/s", "U-Net bandwidth on the ATM prototype",
                                  "unet: abstract", ""),
        "bandwidth_full_at_bytes": _v(None, "bytes", "message size reaching full bandwidth", "-",
                                      "not found"),
        "udp_rtt_us": _v(None, "us", "UDP over U-Net round trip", "-", "not found"),
        "tcp": _v(None, "-", "TCP over U-Net", "unet: abstract (qualitative)",
                  "abstract only says U-Net achieves TCP performance at maximum network "
                  "bandwidth; no number"),
        "um.rtt_us": _v(None, "us", "U-Net Active Messages (UAM) round trip", "-", "not found"),
        "um.bandwidth_mbps": _v(None, "MB/s", "UAM bandwidth", "-", "not found"),
        "um.splitc": _v(None, "-", "Split-C benchmarks", "unet: abstract (qualitative)",
                        "abstract: performance equivalent to Meiko CS-2 and TMC CM-5 on a set "
                        "of Split-C benchmarks"),
        "mm.tlb_miss_cost_us": _v(None, "us", "U-Net/MM NI TLB miss cost", "-",
                                  "not found (only abstracts of the TR and poster reachable)"),
        "mm.latency_us": _v(None, "us", "U-Net/MM latency", "-", "not found"),
        "mm.bw_vs_working_set": _v(None, "MB/s", "bandwidth vs buffer working set", "-",
                                   "not found"),
        "hpca97.atm_rtt_us": _v(90, "us", "U-Net application-level round trip over ATM (lowest)",
                                _HPCA97,
                                "2nd pass. SECONDARY for this seed: a later paper by the same group; "
                                "abstract says round trips 'as low as ... 90 usec over ATM'. Its "
                                "ATM hardware (PC + PCA-200 vs SPARC + SBA-200) is not stated in the "
                                "abstract; not the SOSP'95 65 us figure, which stays in rtt_us"),
        "hpca97.fe_rtt_us": _v(60, "us", "U-Net/FE application-level round trip over Fast Ethernet (lowest)",
                               _HPCA97,
                               "2nd pass. SECONDARY (same abstract): 'as low as 60 usec over Fast "
                               "Ethernet'; the U-Net/FE paper (Welsh, Basu, von Eicken, technodocbox "
                               "copy) says 'less than 60us'"),
    },
}

HARDWARE = {
    "lanai4": {
        "clock_mhz": _v(33, "MHz", "LANai core clock",
                        "secondary: blog 'Lanai, the mystery CPU architecture in LLVM' "
                        "(https://vuink.com/post/d3x-d-dbet/lanai-d-dhtml)",
                        "blog says LANai 'originally ran at 33MHz, the speed of the PCI bus'; "
                        "not specific to the 4.x revision or to the VMMC paper's card"),
        "sram_bytes": _v(1 << 20, "bytes", "on-board SRAM of a LANai 4.x card",
                         "Chen et al., USENIX Windows NT Symposium 1999, Sec. on setup "
                         "(https://static.usenix.org/publications/library/proceedings/usenix-nt99/full_papers/chen/chen_html/node13.html)",
                         "a later Princeton paper's LANai 4.x cards had 1 MB; the VMMC IPPS card's "
                         "SRAM size was not found. The original Myrinet link spec says interfaces "
                         "had 128 KB (early cards)"),
        "host_bus": _v("PCI", "-", "host bus of the VMMC NI", "vmmc: abstract and poster",
                       "width/clock not stated in the found text. unconfirmed: 32-bit/33-MHz"),
        "host_bus_peak_mbps": _v(132, "MB/s", "peak of a 32-bit/33-MHz PCI bus",
                                 "myricom: PCI64 product pages (generic PCI figures)",
                                 "generic PCI limit; that the VMMC card was 32-bit/33-MHz is "
                                 "an assumption"),
        "dma_sustained_mbps": _v(None, "MB/s", "sustained host DMA", "-",
                                 "not found; VMMC poster only says 108 MB/s is ~98% of "
                                 "hardware bandwidth"),
        "link_gbps": _v(1.28, "Gb/s", "Myrinet link rate in the VMMC setup",
                        "vmmc poster",
                        "poster: 'available network bandwidth is 1.28 Gb/s per connection'. "
                        "Per-direction vs aggregate is ambiguous: an old Myrinet catalog entry "
                        "describes 0.64 Gb/s per channel = 1.28 Gb/s full-duplex aggregate for "
                        "the first generation, while fact-index says later versions ran 1.28 "
                        "Gb/s. 160 MB/s per direction holds only if 1.28 is per direction"),
        "switch_hop_latency_us": _v(None, "us", "switch/link latency per hop", "-",
                                    "not found for the LANai 4 era"),
        "instructions_per_cycle": _v(None, "instr/cycle", "LANai issue rate when not stalled",
                                     "-", "not found. unconfirmed: ~1 instruction per cycle"),
        "dma_startup_us": _v(None, "us", "DMA startup cost", "-", "not found"),
        "rx_word_bytes": _v(4, "bytes",
                            "receive pointer (RMP) advances per word on LANai 4.x",
                            "code comment in a public Myrinet control program (find_string id "
                            "28474846907)",
                            "same comment gives 8 bytes for LANai 7.x; repository not "
                            "identified, treat as secondary"),
    },
    "lanai7": {
        "clock_mhz": _v(None, "MHz", "LANai 7 clock", "-",
                        "not found (2nd pass: Myricom PCI64 pages give PCI clocks and LANai 9 "
                        "clocks, not the LANai 7 core clock). unconfirmed: 66 MHz"),
        "host_bus": _v(None, "-", "host bus of the VIA paper's NI", "-",
                       "not found for the VIA paper. Myricom M2L-PCI64A (64/32-bit, 66/33-MHz "
                       "PCI) is of that era but its LANai version was not stated in the text "
                       "seen (PCI64B = LANai 9 at up to 133 MHz, PCI64C up to 200 MHz). "
                       "2nd pass: Myricom 'PCI64 Programmer's Documentation' "
                       "(http://www.myri.com/myrinet/PCI64/programming.html, product table) lists "
                       "M2M/M2L-PCI64-2 = 64-bit 33-MHz PCI with LANai 7.0 or 7.1 (produced 4/99-8/99) "
                       "and M2M/M2L-PCI64A = 64-bit 66-MHz PCI with LANai 7.2 (9/99-6/00); so a "
                       "LANai 7 card was 64-bit PCI at 33 or 66 MHz, but which one the VIA paper "
                       "used is still unknown"),
        "host_bus_peak_mbps": _v({"64bit_66MHz": 528, "64bit_33MHz": 264, "32bit_66MHz": 264,
                                  "32bit_33MHz": 132},
                                 "MB/s", "PCI peak rates as stated by Myricom",
                                 "myricom: M2L-PCI64A page",
                                 "generic PCI limits; which one applies to the VIA testbed is "
                                 "not known"),
        "link_gbps": _v(None, "Gb/s", "link rate of the VIA paper's Myrinet", "-",
                        "not found; Myrinet-2000 links are 2+2 Gb/s (slideplayer/netzikon), "
                        "earlier ones 1.28 Gb/s; which one the paper used is unknown"),
        "rx_word_bytes": _v(8, "bytes", "receive pointer (RMP) advance per word on LANai 7.x",
                            "same code comment as lanai4.rx_word_bytes", "secondary"),
        "myrinet2000_hw_latency_us": _v(0.5, "us",
                                        "hardware latency between two NIC ports through one "
                                        "switch incl. fiber PHY conversion",
                                        "myricom: Myrinet-2000 performance page",
                                        "Myrinet-2000 / Lanai-X era, later than both papers; "
                                        "fiber adds ~0.0065 us per meter"),
        "instructions_per_cycle": _v(None, "instr/cycle", "issue rate", "-", "not found"),
        "dma_startup_us": _v(None, "us", "DMA startup cost", "-", "not found"),
    },
}

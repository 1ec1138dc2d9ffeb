#!/usr/bin/python3
"""Writes the hwloc XML fixtures under tests/topo/ (hwloc 2.x format, as lstopo --of xml writes):

  laptop.xml        1 package, 1 NUMA node, 4 cores x 2 PUs, 8 MiB L3, 256 KiB of L2 a core,
                    one Ethernet NIC, no GPU
  server-2s.xml     2 packages, a NUMA node and 32 MiB of L3 each, 16 cores each with 1 MiB of
                    L2, an Ethernet NIC per socket
  gpu8-nic4.xml     2 packages with 48 MiB of L3 each; under each, 2 PCIe switches; under each
                    switch 2 GPUs (NVIDIA 3D controllers, cudaN) and 1 InfiniBand NIC (mlx5_N):
                    8 GPUs, 4 NICs
  gpu8-nic4-mgmt.xml  the same with a 1 GbE management port (x1 link) at the lowest bus id, as
                    most GPU servers have
  no-nic.xml        1 package, 8 cores, no caches described, a disk and nothing else on PCI
  server-2s-cxl.xml server-2s.xml with a third NUMA node that has memory and no CPUs (CXL or HBM
                    memory, as `numactl -H` shows it) and an FPGA accelerator (PCI class 0x1200,
                    not a GPU) on the second package
  server-nic-mgmt.xml  1 package; one 100G RoCE NIC and a 1 GbE management port at a lower bus id
  server-rdma-speeds.xml  1 package; three InfiniBand NICs on x16 and x8 PCIe 4.0 links and on a
                    x2 PCIe 3.0 link (too slow to carry traffic)
  gpu4-root-ports.xml  2 packages; no PCIe switches: each GPU and each socket's NIC on a root port
  gpu8-nic8.xml     gpu8-nic4.xml with two NICs under each switch: a NIC for every GPU

Run it again after changing it; the files are checked in."""

import os

HERE = os.path.dirname(os.path.abspath(__file__))


def bitmap(bits):
    """hwloc's bitmap syntax: 32-bit words, most significant first, comma-separated."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    return ",".join(f"0x{w:08x}" for w in reversed(words))


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0
        self.depth = 0

    def open(self, attrs):
        self.gp += 1
        text = " ".join(f'{k}="{v}"' for k, v in attrs)
        self.lines.append("  " * self.depth + f'<object {text} gp_index="{self.gp}">')
        self.depth += 1

    def close(self):
        self.depth -= 1
        self.lines.append("  " * self.depth + "</object>")

    def leaf(self, attrs):
        self.gp += 1
        text = " ".join(f'{k}="{v}"' for k, v in attrs)
        self.lines.append("  " * self.depth + f'<object {text} gp_index="{self.gp}"/>')


def sets(cpus, nodes):
    c, n = bitmap(cpus), bitmap(nodes)
    return [("cpuset", c), ("complete_cpuset", c), ("nodeset", n), ("complete_nodeset", n)]


def pci(busid, cls, vendor, device, link_speed="15.753846"):
    return [("pci_busid", busid), ("pci_type", f"{cls:04x} [{vendor:04x}:{device:04x}] [{vendor:04x}:0000] 01"),
            ("pci_link_speed", link_speed)]


def host_bridge(w, domain_bus_range):
    w.open([("type", "Bridge"), ("bridge_type", "0-1"), ("depth", "0"), ("bridge_pci", domain_bus_range)])


def switch(w, busid, secondary_range, depth):
    w.open([("type", "Bridge"), ("bridge_type", "1-1"), ("depth", str(depth)), ("bridge_pci", secondary_range)]
           + pci(busid, 0x0604, 0x10B5, 0x8747))


def pci_device(w, busid, cls, vendor, device, osdevs, link_speed="15.753846"):
    w.open([("type", "PCIDev")] + pci(busid, cls, vendor, device, link_speed))
    for name, kind in osdevs:
        w.leaf([("type", "OSDev"), ("name", name), ("osdev_type", str(kind))])
    w.close()


GPU, NETWORK, OPENFABRICS, COPROC, BLOCK = 1, 2, 3, 5, 0


def machine(name, packages, cores_per_package, pus_per_core, io, l3_mib=0, l2_kib=0, cpuless_nodes=0):
    """io(w, package_index) writes the PCI trees attached to that package; l3_mib: an L3 cache of
    that size over each package's cores (0: none described); l2_kib: an L2 cache of that size
    over each core (0: none described); cpuless_nodes: NUMA nodes with
    memory and no CPUs, attached to the machine (os indices after the packages' nodes)."""
    w = Writer()
    total = packages * cores_per_package * pus_per_core
    nodes = range(packages + cpuless_nodes)
    w.open([("type", "Machine"), ("os_index", "0")] + sets(range(total), nodes)
           + [("allowed_cpuset", bitmap(range(total))), ("allowed_nodeset", bitmap(nodes))])
    w.lines.append("  " * w.depth + f'<info name="HostName" value="{name}"/>')
    for n in range(packages, packages + cpuless_nodes):
        w.leaf([("type", "NUMANode"), ("os_index", str(n))] + sets([], [n]) + [("local_memory", str(128 << 30))])
    pu = 0
    for p in range(packages):
        first = p * cores_per_package * pus_per_core
        cpus = range(first, first + cores_per_package * pus_per_core)
        w.open([("type", "Package"), ("os_index", str(p))] + sets(cpus, [p]))
        w.leaf([("type", "NUMANode"), ("os_index", str(p))] + sets(cpus, [p]) + [("local_memory", str(64 << 30))])
        if l3_mib:
            w.open([("type", "L3Cache")] + sets(cpus, [p]) + [("cache_size", str(l3_mib << 20)), ("depth", "3"),
                    ("cache_linesize", "64"), ("cache_associativity", "16"), ("cache_type", "0")])
        for c in range(cores_per_package):
            core_cpus = range(pu, pu + pus_per_core)
            if l2_kib:
                w.open([("type", "L2Cache")] + sets(core_cpus, [p]) + [("cache_size", str(l2_kib << 10)),
                        ("depth", "2"), ("cache_linesize", "64"), ("cache_associativity", "16"), ("cache_type", "0")])
            w.open([("type", "Core"), ("os_index", str(p * cores_per_package + c))] + sets(core_cpus, [p]))
            for t in range(pus_per_core):
                w.leaf([("type", "PU"), ("os_index", str(pu))] + sets([pu], [p]))
                pu += 1
            w.close()
            if l2_kib:
                w.close()
        if l3_mib:
            w.close()
        io(w, p)
        w.close()
    w.close()
    header = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
              '<topology version="2.0">']
    return "\n".join(header + w.lines + ["</topology>", ""])


def laptop_io(w, p):
    host_bridge(w, "0000:[00-02]")
    pci_device(w, "0000:00:1f.6", 0x0200, 0x8086, 0x15FB, [("eth0", NETWORK)])
    pci_device(w, "0000:01:00.0", 0x0108, 0x144D, 0xA808, [("nvme0n1", BLOCK)])
    w.close()


def server_io(w, p):
    bus = 0x10 + p * 0x40
    host_bridge(w, f"0000:[{bus:02x}-{bus + 0x3f:02x}]")
    pci_device(w, f"0000:{bus + 1:02x}:00.0", 0x0200, 0x8086, 0x1593, [(f"ens{p + 1}f0", NETWORK)])
    w.close()


def gpu_io(w, p):
    base = 0x10 + p * 0x80
    host_bridge(w, f"0000:[{base:02x}-{base + 0x7f:02x}]")
    for s in range(2):  # two switches per socket
        k = p * 2 + s  # switch index 0..3: NIC k, GPUs 2k and 2k+1
        sbus = base + 1 + s * 0x20
        switch(w, f"0000:{base:02x}:{0x01 + s:02x}.0", f"0000:[{sbus:02x}-{sbus + 0x1f:02x}]", 1)
        for g in range(2):
            gpu = 2 * k + g
            gbus = sbus + 1 + g
            switch(w, f"0000:{sbus:02x}:{g:02x}.0", f"0000:[{gbus:02x}-{gbus:02x}]", 2)
            pci_device(w, f"0000:{gbus:02x}:00.0", 0x0302, 0x10DE, 0x20B0, [(f"cuda{gpu}", COPROC), (f"nvml{gpu}", GPU)])
            w.close()
        nbus = sbus + 3
        switch(w, f"0000:{sbus:02x}:02.0", f"0000:[{nbus:02x}-{nbus:02x}]", 2)
        pci_device(w, f"0000:{nbus:02x}:00.0", 0x0207, 0x15B3, 0x101B, [(f"mlx5_{k}", OPENFABRICS), (f"ib{k}", NETWORK)])
        w.close()
        w.close()
    w.close()


def gpu_mgmt_io(w, p):
    """gpu_io, and on the first package a 1 GbE management port on a x1 link at the lowest bus id."""
    if p == 0:
        host_bridge(w, "0000:[00-0f]")
        pci_device(w, "0000:02:00.0", 0x0200, 0x14E4, 0x165F, [("eno1", NETWORK)], link_speed="0.250000")
        w.close()
    gpu_io(w, p)


def server_fpga_io(w, p):
    """server_io, and on the second package an FPGA card (a processing accelerator, class 0x1200)."""
    server_io(w, p)
    if p == 1:
        host_bridge(w, "0000:[90-9f]")
        pci_device(w, "0000:91:00.0", 0x1200, 0x10EE, 0x500C, [])
        w.close()


def fabric_mgmt_io(w, p):
    """One 100G RoCE NIC and a 1 GbE management port on a x1 link at a lower bus id."""
    host_bridge(w, "0000:[00-0f]")
    pci_device(w, "0000:02:00.0", 0x0200, 0x14E4, 0x165F, [("eno1", NETWORK)], link_speed="0.250000")
    w.close()
    host_bridge(w, "0000:[10-1f]")
    pci_device(w, "0000:11:00.0", 0x0200, 0x15B3, 0x1017, [("mlx5_0", OPENFABRICS), ("ens1f0np0", NETWORK)])
    w.close()


def rdma_speeds_io(w, p):
    """Three RDMA NICs of one kind: x16 and x8 PCIe 4.0 links, and one on a x2 PCIe 3.0 link (an
    eighth of the first's bandwidth: too slow to carry a share of the traffic)."""
    host_bridge(w, "0000:[10-3f]")
    for k, (bus, speed) in enumerate([(0x11, "31.507692"), (0x21, "15.753846"), (0x31, "1.969231")]):
        pci_device(w, f"0000:{bus:02x}:00.0", 0x0207, 0x15B3, 0x101B,
                   [(f"mlx5_{k}", OPENFABRICS), (f"ib{k}", NETWORK)], link_speed=speed)
    w.close()


def root_port_io(w, p):
    """No PCIe switches: each GPU and the socket's NIC on a root port (host bridge) of its own."""
    base = 0x10 + p * 0x80
    for g in range(2):
        bus = base + g * 0x10
        host_bridge(w, f"0000:[{bus:02x}-{bus + 0xf:02x}]")
        pci_device(w, f"0000:{bus + 1:02x}:00.0", 0x0302, 0x10DE, 0x2330, [(f"cuda{p * 2 + g}", COPROC)])
        w.close()
    bus = base + 0x40
    host_bridge(w, f"0000:[{bus:02x}-{bus + 0xf:02x}]")
    pci_device(w, f"0000:{bus + 1:02x}:00.0", 0x0207, 0x15B3, 0x101B, [(f"mlx5_{p}", OPENFABRICS), (f"ib{p}", NETWORK)])
    w.close()


def gpu_nic_pairs_io(w, p):
    """Two switches per socket, each with two GPUs and two NICs: a NIC for every GPU."""
    base = 0x10 + p * 0x80
    host_bridge(w, f"0000:[{base:02x}-{base + 0x7f:02x}]")
    for s in range(2):
        k = p * 2 + s
        sbus = base + 1 + s * 0x20
        switch(w, f"0000:{base:02x}:{1 + s:02x}.0", f"0000:[{sbus:02x}-{sbus + 0x1f:02x}]", 1)
        for g in range(2):
            pci_device(w, f"0000:{sbus + 1 + g:02x}:00.0", 0x0302, 0x10DE, 0x2330, [(f"cuda{2 * k + g}", COPROC)])
        for n in range(2):
            nic = 2 * k + n
            pci_device(w, f"0000:{sbus + 5 + n:02x}:00.0", 0x0207, 0x15B3, 0x1021,
                       [(f"mlx5_{nic}", OPENFABRICS), (f"ib{nic}", NETWORK)])
        w.close()
    w.close()


def no_nic_io(w, p):
    host_bridge(w, "0000:[00-01]")
    pci_device(w, "0000:00:02.0", 0x0180, 0x1AF4, 0x1042, [("vda", BLOCK)])
    w.close()


def main():
    fixtures = {
        "laptop.xml": machine("laptop", 1, 4, 2, laptop_io, l3_mib=8, l2_kib=256),
        "server-2s.xml": machine("server", 2, 16, 1, server_io, l3_mib=32, l2_kib=1024),
        "gpu8-nic4.xml": machine("gpunode", 2, 24, 2, gpu_io, l3_mib=48),
        "gpu8-nic4-mgmt.xml": machine("gpunode", 2, 24, 2, gpu_mgmt_io, l3_mib=48),
        "no-nic.xml": machine("quiet", 1, 8, 1, no_nic_io),
        "server-nic-mgmt.xml": machine("server", 1, 16, 1, fabric_mgmt_io, l3_mib=32),
        "server-rdma-speeds.xml": machine("server", 1, 16, 1, rdma_speeds_io, l3_mib=32),
        "gpu4-root-ports.xml": machine("gpunode", 2, 8, 1, root_port_io, l3_mib=16),
        "gpu8-nic8.xml": machine("gpunode", 2, 24, 2, gpu_nic_pairs_io, l3_mib=48),
        "server-2s-cxl.xml": machine("server", 2, 16, 1, server_fpga_io, l3_mib=32, cpuless_nodes=1),
    }
    for name, text in fixtures.items():
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()

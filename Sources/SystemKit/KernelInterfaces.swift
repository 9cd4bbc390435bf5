@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// File systems that are the kernel's interfaces, not data: procfs, sysfs,
/// cgroups, debugfs and the like. A folder on one, or holding one mounted
/// beneath it, is never a grant or a container: for a command launched by
/// root (uid 0 without capabilities) file modes are the only check on many
/// of their files (`/proc/sys/kernel/core_pattern`, sysfs knobs), and even
/// reading them shows every process of the host.
public enum KernelInterfaces {
    /// `statfs.f_type` of each, with the name /proc/self/mountinfo gives it.
    static let magics: [Int: String] = [
        0x9fa0: "proc", 0x6265_6572: "sysfs", 0x27e0eb: "cgroup", 0x6367_7270: "cgroup2", 0x6462_6720: "debugfs",
        0x7472_6163: "tracefs", 0x7363_6673: "securityfs", 0xcafe_4a11: "bpf", 0x6265_6570: "configfs",
        0xde5e_81e4: "efivarfs", 0x6165_676c: "pstore", 0x6e73_6673: "nsfs", 0x4249_4e4d: "binfmt_misc", 0x1cd1: "devpts",
        0xf97c_ff8c: "selinuxfs", 0x6573_5543: "fusectl", 0x1980_0202: "mqueue", 0x4341_5d53: "smackfs",
    ]
    static let names = Set(magics.values).union(["devtmpfs"])

    /// The mounts of this process's namespace: (mount point, type), read
    /// once and asked for several folders (`exposed(by:path:mounts:)`).
    public typealias Mounts = [(point: [UInt8], type: String)]

    /// Where a kernel interface is reachable through the folder `descriptor`
    /// holds (the folder itself, or a mount beneath `path`, its kernel
    /// name), and which; nil when none is. A folder whose file system cannot
    /// be asked, or whose mounts cannot be read, counts as one (fail closed).
    /// `mounts`: the table read beforehand with `mounts()` (nil inside: it
    /// could not be read), or nil to read it here.
    public static func exposed(by descriptor: CInt, path: [UInt8], mounts: Mounts?? = nil) -> (path: [UInt8], type: String)? {
        var type: Int64 = 0
        guard csb_filesystem_type(descriptor, &type) == 0 else { return (path, "unknown (statfs failed)") }
        if let name = magics[Int(truncatingIfNeeded: type) & 0xffff_ffff] { return (path, name) }
        guard let table = mounts ?? self.mounts() else { return (path, "unknown (mountinfo unreadable)") }
        let prefix = path == [UInt8(ascii: "/")] ? path : path + [UInt8(ascii: "/")]
        for mount in table where mount.point == path || mount.point.starts(with: prefix) {
            let base = mount.type.split(separator: ".").first.map(String.init) ?? mount.type  // "fuse.x" and the like are data
            if names.contains(base) { return (mount.point, mount.type) }
        }
        return nil
    }

    /// /proc/self/mountinfo's mount points and types.
    public static func mounts() -> Mounts? {
        let fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var table: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            table += buffer[0..<count]
        }
        var mounts: Mounts = []
        for line in table.split(separator: UInt8(ascii: "\n")) {
            // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER"
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
            guard fields.count > 4, let dash = fields.firstIndex(where: { $0.elementsEqual([UInt8(ascii: "-")]) }), dash + 1 < fields.count else { continue }
            mounts.append((unescaped(Array(fields[4])), String(decoding: fields[dash + 1], as: UTF8.self)))
        }
        return mounts
    }

    /// mountinfo's octal escapes (`\040` for a space) undone.
    static func unescaped(_ field: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while index < field.count {
            if field[index] == UInt8(ascii: "\\"), index + 3 < field.count,
               let value = UInt8(String(decoding: field[(index + 1)...(index + 3)], as: UTF8.self), radix: 8) {
                out.append(value)
                index += 4
            } else {
                out.append(field[index])
                index += 1
            }
        }
        return out
    }
}

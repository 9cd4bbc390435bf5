@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// A process named so that it cannot be confused with a later one that
/// reuses its pid: the boot, the pid namespace the pid is read in, the pid,
/// and the start time the kernel gives in `/proc/PID/stat` (clock ticks
/// after boot; two processes that hold one pid in turn never share it).
public struct ProcessIdentity: Sendable, Hashable, CustomStringConvertible {
    /// `/proc/sys/kernel/random/boot_id`: a record from before a reboot names no process.
    public let boot: String
    /// The inode of `/proc/self/ns/pid` where `pid` was read: a pid means
    /// nothing in another pid namespace.
    public let pidNamespace: UInt64
    public let pid: pid_t
    /// Field 22 of `/proc/PID/stat`.
    public let startTime: UInt64

    public init(boot: String, pidNamespace: UInt64, pid: pid_t, startTime: UInt64) {
        self.boot = boot
        self.pidNamespace = pidNamespace
        self.pid = pid
        self.startTime = startTime
    }

    public var description: String { "pid \(pid)" }

    /// This process.
    public static func current() throws(Errno) -> ProcessIdentity {
        let pid = getpid()
        guard let start = try startTime(of: pid) else { throw .noSuchProcess }
        return ProcessIdentity(boot: try bootID(), pidNamespace: try pidNamespace(), pid: pid, startTime: start)
    }

    /// What can be said of `self` from this process.
    public enum State: Sendable, Equatable {
        /// The very process is running (or a zombie not yet reaped).
        case running
        /// It ended: its pid is free or another process's, or the machine rebooted.
        case gone
        /// Named in another pid namespace: nothing can be said from here.
        case elsewhere
    }

    public func state() throws(Errno) -> State {
        guard boot == (try Self.bootID()) else { return .gone }
        guard pidNamespace == (try Self.pidNamespace()) else { return .elsewhere }
        return try Self.startTime(of: pid) == startTime ? .running : .gone
    }

    /// A pidfd of exactly this process, nil when it is gone (or elsewhere).
    /// The pidfd is opened first and the start time read after: a match
    /// means the pidfd's process is the one named (a pid reused before the
    /// open shows another start time), and signals sent through it can reach
    /// nothing else, however soon the process ends.
    public func open() throws(Errno) -> OwnedDescriptor? {
        guard try state() == .running else { return nil }
        let fd: OwnedDescriptor
        do {
            fd = OwnedDescriptor(taking: try syscallRetrying { csb_pidfd_open(pid) })
        } catch .noSuchProcess {
            return nil
        }
        return try Self.startTime(of: pid) == startTime ? fd : nil
    }

    /// The start time in `/proc/PID/stat`, nil when there is no such process.
    public static func startTime(of pid: pid_t) throws(Errno) -> UInt64? {
        guard pid > 0 else { return nil }
        let bytes: [UInt8]
        do { bytes = try readSmall("/proc/\(pid)/stat") } catch .noSuchFileOrDirectory { return nil } catch .noSuchProcess { return nil }
        return parseStartTime(bytes)
    }

    /// Field 22 of a `/proc/PID/stat` line. The command name (field 2) is
    /// any bytes in parentheses, ")" and spaces included: fields are counted
    /// from the last ")".
    public static func parseStartTime(_ line: [UInt8]) -> UInt64? {
        guard let close = line.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = line[(close + 1)...].split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
        // After the name: field 3 (state) is fields[0], so field 22 is fields[19].
        guard fields.count > 19 else { return nil }
        let digits = fields[19].filter { $0 != UInt8(ascii: "\n") }
        guard !digits.isEmpty, digits.count <= 20, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt64(String(decoding: digits, as: UTF8.self))
    }

    public static func bootID() throws(Errno) -> String {
        let text = String(decoding: try readSmall("/proc/sys/kernel/random/boot_id"), as: UTF8.self)
            .trimmingSuffix { $0 == "\n" }
        guard text.utf8.count == 36, text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || $0 == 0x2D }) else {
            throw .invalidArgument
        }
        return text
    }

    public static func pidNamespace() throws(Errno) -> UInt64 {
        var st = stat()
        _ = try syscallRetrying { stat("/proc/self/ns/pid", &st) }
        return UInt64(st.st_ino)
    }

    private static func readSmall(_ path: String) throws(Errno) -> [UInt8] {
        let fd = OwnedDescriptor(taking: try syscallRetrying { Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY) })
        var bytes = [UInt8](repeating: 0, count: 4096)
        var total = 0
        while total < bytes.count {
            let got = try syscallRetrying { bytes.withUnsafeMutableBytes { read(fd.rawValue, $0.baseAddress! + total, $0.count - total) } }
            if got == 0 { break }
            total += got
        }
        return Array(bytes[..<total])
    }
}

extension String {
    fileprivate func trimmingSuffix(while drop: (Character) -> Bool) -> String {
        var text = Substring(self)
        while let last = text.last, drop(last) { text = text.dropLast() }
        return String(text)
    }
}

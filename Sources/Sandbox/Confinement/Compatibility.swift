@preconcurrency import Glibc
import CSyscalls

/// What to do when the kernel cannot enforce part of a policy (after
/// rust-landlock): refuse, or run with what there is and say so.
public enum CompatibilityLevel: Sendable {
    /// Refuse to launch unless every protection the policy needs is enforced.
    case hardRequirement
    /// Enforce what the kernel offers and report the rest.
    case bestEffort
}

/// What this kernel offers, probed once per launch (three cheap syscalls).
public struct KernelFeatures: Sendable {
    public let landlockABI: Int
    public let seccompFilter: Bool
    public let seccompUserNotification: Bool

    public static func probe() -> KernelFeatures {
        KernelFeatures(
            landlockABI: Landlock.abiVersion(),
            seccompFilter: csb_seccomp_supported() == 0,
            seccompUserNotification: csb_seccomp_notify_supported() == 0)
    }
}

/// One protection and whether this launch enforces it.
public struct Protection: Sendable, Equatable {
    public let name: String
    public let enforced: Bool
    /// Why not, or what happens instead.
    public let detail: String
    /// A protection whose absence is reported but does not stop a launch:
    /// one the kernel never gives in this situation (nproc for root).
    public let reportOnly: Bool

    public init(name: String, enforced: Bool, detail: String, reportOnly: Bool = false) {
        self.name = name
        self.enforced = enforced
        self.detail = detail
        self.reportOnly = reportOnly
    }
}

/// What was actually enforced, for `--best-effort` runs and `doctor`.
public struct EnforcementReport: Sendable, Equatable {
    public let features: KernelFeatures.Snapshot
    public let protections: [Protection]

    public var missing: [Protection] { protections.filter { !$0.enforced && !$0.reportOnly } }

    public var text: String {
        var lines = ["Landlock ABI \(features.landlockABI) (this build knows up to \(Landlock.newestKnownABI))"]
        for protection in protections {
            let mark = protection.enforced ? "enforced" : protection.reportOnly ? "NOT APPLIED" : "NOT ENFORCED"
            lines.append("  \(mark): \(protection.name)" + (protection.detail.isEmpty ? "" : " (\(protection.detail))"))
        }
        return lines.joined(separator: "\n")
    }
}

extension EnforcementReport {
    /// This report with one more protection.
    func adding(_ protection: Protection) -> EnforcementReport {
        EnforcementReport(features: features, protections: protections + [protection])
    }

    /// What `policy` would get on a kernel with `features`.
    public init(features: KernelFeatures, policy: Policy) {
        self.init(features: .init(landlockABI: features.landlockABI), protections: features.protections(for: policy))
    }
}

extension KernelFeatures {
    /// The launcher's capabilities as libcap prints them.
    public static var launcherCapabilities: String { Capabilities.currentText }

    public struct Snapshot: Sendable, Equatable {
        public let landlockABI: Int
    }

    /// The protections a policy needs, and which of them this kernel gives.
    func protections(for policy: Policy) -> [Protection] {
        let abi = landlockABI
        func landlock(_ name: String, _ minimum: Int, _ instead: String) -> Protection {
            Protection(name: name, enforced: abi >= minimum,
                       detail: abi >= minimum ? "Landlock ABI \(minimum)" : "needs Landlock ABI \(minimum); \(instead)")
        }
        var list = [
            landlock("file access limited to the policy's paths, the container and grants", 1,
                     "every file the user can reach is open to the command"),
            landlock("truncating files outside the writable folders", 3, "truncate() outside is not stopped"),
            landlock("ioctl on devices", 5, "device ioctls are not limited"),
            landlock("signals and abstract unix sockets limited to the sandbox", 6,
                     "the command can signal and connect to processes outside"),
            landlock("every process the command starts ends with it", 6,
                     "in a pid namespace of the sandbox's own (when the kernel grants one) every process still ends; "
                         + "without one, the command's process group and the orphans the keeper inherits are killed, but a "
                         + "process that forks faster than that, or that kills the keeper (the command can), is not killed"),
        ]
        let restrictsTCP = policy.tcpConnectPorts != nil || policy.tcpBindPorts != nil || policy.networkClient != policy.networkServer
        if restrictsTCP {
            list.append(landlock("TCP connect/bind limited by the policy", 4, "TCP connect and bind are not limited"))
        }
        if !policy.limits.isEmpty {
            // The kernel never applies RLIMIT_NPROC to real uid 0: said so, not claimed.
            let root = getuid() == 0
            let values = policy.limits.sorted { $0.key < $1.key }.compactMap { limit, value -> String? in
                guard limit == .nproc else { return "\(limit.rawValue) \(value)" }
                return root ? nil : "nproc +\(value)"
            }
            // Not `joined(separator:)`: its generic body's dynamic cast scans
            // all 4,600 conformance records of the binary, once per launch.
            let listed = values.reduce(into: "") { text, value in text += (text.isEmpty ? "" : ", ") + value }
            list.append(Protection(name: "resource limits (soft and hard, never above the launcher's): " + listed,
                                   enforced: true, detail: "setrlimit before exec; nproc counts from the user's processes at launch"))
            if root, let nproc = policy.limits[.nproc] {
                list.append(Protection(name: "process count (nproc \(nproc))", enforced: false,
                                       detail: "not applied: the kernel exempts uid 0 from RLIMIT_NPROC, and the sandbox's pid namespace "
                                           + "does not bound it (a cgroup's pids.max would); launch as an unprivileged user to have it",
                                       reportOnly: true))
            }
        }
        list.append(Protection(name: "seccomp-bpf syscall allow-list", enforced: seccompFilter,
                               detail: seccompFilter ? "" : "no seccomp: every syscall is open"))
        list.append(Protection(name: "metadata changes (chmod, chown, utimes, xattrs) only inside writable folders",
                               enforced: seccompUserNotification,
                               detail: seccompUserNotification ? "seccomp user notification"
                                   : "no seccomp user notification: metadata changes are refused everywhere instead"))
        return list
    }
}

extension KernelFeatures {
    /// The launcher's effective capabilities by name (`cap_sys_admin`, ...).
    public static var launcherCapabilityNames: [String] { Capabilities.effective }
    /// The capabilities this kernel knows that the launcher lacks.
    public static var launcherMissingCapabilities: [String] {
        let held = Set(Capabilities.effective)
        return Capabilities.all.filter { !held.contains($0) }
    }
    /// What a capability lets a process do, in words ("" for the less common ones).
    public static func capabilityWords(_ name: String) -> String { Capabilities.words(name) }
}

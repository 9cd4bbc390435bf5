@preconcurrency import Glibc
import CLaunch

/// Whether the private view can be built for this user, found by trying:
/// a forked child takes the namespaces the keeper takes and mounts a tmpfs
/// there (`csb_probe_private_view`), as root first without a user
/// namespace, then (as the keeper does when that is refused) with one.
public enum PrivateViewAvailability: Sendable, Equatable {
    /// Root: mount and pid namespaces of the sandbox's own, no user namespace.
    case root
    /// An unprivileged user namespace (the launcher's uid and gid mapped to themselves).
    case userNamespace
    /// Neither: the step that failed and its errno.
    case unavailable(String)

    public static func probe() -> PrivateViewAvailability {
        if geteuid() == 0, attempt(userNamespace: false) == nil { return .root }
        if let problem = attempt(userNamespace: true) { return .unavailable(problem) }
        return .userNamespace
    }

    /// Nil when every step worked, else what failed.
    static func attempt(userNamespace: Bool) -> String? {
        var step: CInt = 0
        var error: CInt = 0
        guard csb_probe_private_view(userNamespace ? 1 : 0, &step, &error) == 0 else {
            return "the probe could not be started: \(Errno(error: errno))"
        }
        let what: String
        switch UInt32(step) {
        case 0: return nil
        case CSB_VIEW_PROBE_USER_NAMESPACE.rawValue:
            what = "an unprivileged user namespace is refused (a sysctl such as user.max_user_namespaces or "
                + "kernel.unprivileged_userns_clone, or an AppArmor restriction as on Ubuntu 23.10 and later)"
        case CSB_VIEW_PROBE_ID_MAP.rawValue: what = "mapping the user's ids in a user namespace failed"
        case CSB_VIEW_PROBE_NAMESPACES.rawValue: what = "new mount and pid namespaces are refused"
        default: what = "mounting a tmpfs in a mount namespace of its own failed"
        }
        return what + " (\(Errno(error: error)))"
    }
}

private struct Errno: CustomStringConvertible {
    let error: CInt
    var description: String {
        let name = switch error {
        case EPERM: "EPERM"
        case ENOSPC: "ENOSPC"
        case EACCES: "EACCES"
        case EINVAL: "EINVAL"
        case ENOMEM: "ENOMEM"
        case EUSERS: "EUSERS"
        case ENOSYS: "ENOSYS"
        default: "errno \(error)"
        }
        return name + ": " + String(cString: strerror(error))
    }
}

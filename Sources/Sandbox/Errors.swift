import SystemPackage

/// Why the launcher itself could not run the command. Each case names what
/// was wrong and what to do, and maps to the documented exit code.
public enum SandboxError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The user asked for something malformed (exit 125).
    case usage(String)
    /// The policy file is wrong (exit 125).
    case policy(PolicyError)
    /// The kernel cannot enforce what the policy demands (exit 125).
    case protectionUnavailable(missing: [String])
    /// Setting up the sandbox failed (exit 125).
    case setup(step: String, errno: Errno)
    /// The command exists but cannot be executed in the sandbox (exit 126).
    case cannotExecute(command: String, errno: Errno)
    /// The command was not found (exit 127).
    case notFound(command: String)
    /// A descriptor to keep open in the command is not open (exit 125).
    case descriptorNotOpen(CInt)
    /// Explaining denials needs seccomp user notification, which this kernel lacks (exit 125).
    case explainUnsupported
    /// The working directory asked for is not a folder the sandbox can reach (exit 125).
    case workingDirectoryUnreachable(FilePath)
    /// The working directory asked for lies deeper than PATH_MAX (exit 125).
    case workingDirectoryTooLong(FilePath)
    /// The denials log (its path, when known) cannot be used, and why (exit 125).
    case denialLog(FilePath?, String)
    /// The private view could not be built here, and why (exit 125). A
    /// launch with `CompatibilityLevel.bestEffort` runs in the host view instead.
    case viewUnavailable(String)
    /// A grant was revoked while the command ran and could not be taken
    /// away from it: the sandbox was ended instead (exit 125).
    case revocationFailed(String)

    public var exitCode: Int32 {
        switch self {
        case .usage, .policy, .protectionUnavailable, .setup, .descriptorNotOpen, .explainUnsupported, .workingDirectoryUnreachable, .denialLog,
             .workingDirectoryTooLong,
             .viewUnavailable, .revocationFailed: 125
        case .cannotExecute: 126
        case .notFound: 127
        }
    }

    public var description: String {
        switch self {
        case .usage(let message):
            message
        case .policy(let error):
            error.description
        case .protectionUnavailable(let missing):
            "this kernel cannot enforce: \(missing.joined(separator: "; "))."
        case .setup(let step, let errno):
            "could not set up the sandbox: \(step) failed: \(errno.description) (errno \(errno.rawValue))"
        case .cannotExecute(let command, let errno):
            if errno == .permissionDenied {
                "cannot execute \(command): permission denied. The policy lets the sandbox execute only "
                    + "programs under its read-execute system paths; install the tool there or add its folder to the policy."
            } else if errno == .noSuchFileOrDirectory {
                "cannot execute \(command): it is not in the sandbox's private view, which holds only the container, the grants and "
                    + "the policy's system paths; install the tool in a read-execute system path of the policy, or add its folder to the policy."
            } else {
                "cannot execute \(command): \(errno.description)"
            }
        case .denialLog(let path, let problem):
            "the denials log\(path.map { " " + Printable.path($0) } ?? ""): \(problem)"
        case .viewUnavailable(let reason):
            "the private view (a root holding only the container, the grants and the policy's system paths) could not be built: \(reason)"
        case .revocationFailed(let reason):
            "a grant was revoked while the command ran and could not be taken away from it (\(reason)): the sandbox was ended"
        case .explainUnsupported:
            "explaining denials needs seccomp user notification (Linux 5.0 or later), which this kernel lacks"
        case .workingDirectoryTooLong(let path):
            "the working directory \(PathLimit.shown(path.bytes)): \(PathLimit.exceeded). Use a folder with a shorter path."
        case .workingDirectoryUnreachable(let path):
            "\(Printable.path(path)): not a folder the sandbox can reach; use its container, a granted folder or one of the policy's system paths"
        case .descriptorNotOpen(let fd):
            "descriptor \(fd), to be kept open in the command, is not open"
        case .notFound(let command):
            "command not found: \(command). Give a path, or a name found in the sandbox's PATH (/usr/local/bin:/usr/bin:/bin)."
        }
    }
}

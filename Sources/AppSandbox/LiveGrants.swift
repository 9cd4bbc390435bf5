@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage

/// A picker program the launcher runs unconfined, as ssh and git run an
/// askpass program: its one argument is the prompt (escaped, cut to
/// `AskpassPicker.promptLimit` characters), it prints the chosen folder's
/// absolute path and a newline (any bytes but NUL and newline) and exits 0;
/// any other status means the person cancelled.
public struct AskpassPicker: Sendable {
    public let program: String
    public static let promptLimit = 200
    /// The most a picker may print: a path and its newline.
    static let outputLimit = 4096

    public init(program: String) {
        self.program = program
    }

    /// The path the person chose, nil when they cancelled.
    public func choose(prompt: String) throws(LiveGrantPickerError) -> [UInt8]? {
        var pipe: [CInt] = [-1, -1]
        guard Glibc.pipe(&pipe) == 0 else { throw .couldNotRun(program: program, errno: Errno(rawValue: errno)) }
        // Close-on-exec at once: nothing else the launcher starts may hold the picker's output.
        _ = fcntl(pipe[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(pipe[1], F_SETFD, FD_CLOEXEC)
        var readEnd: CInt? = pipe[0]
        defer { if let readEnd { close(readEnd) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(program), strdup(prompt), nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawnp(&pid, program, &actions, nil, argv, environ)
        close(pipe[1])
        guard spawned == 0 else { throw .couldNotRun(program: program, errno: Errno(rawValue: spawned)) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        while output.count <= Self.outputLimit {
            let got = chunk.withUnsafeMutableBytes { read(pipe[0], $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            output += chunk[..<got]
        }
        close(pipe[0])
        readEnd = nil  // a picker still writing gets SIGPIPE
        var status: CInt = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status & 0x7F == 0, (status >> 8) & 0xFF == 0 else { return nil }
        guard output.count <= Self.outputLimit, output.last == UInt8(ascii: "\n"),
              output.filter({ $0 == UInt8(ascii: "\n") }).count == 1, !output.contains(0), output.count > 1 else {
            throw .badOutput(program: program)
        }
        return Array(output.dropLast())
    }
}

public enum LiveGrantPickerError: Error, Equatable, CustomStringConvertible, Sendable {
    case couldNotRun(program: String, errno: Errno)
    case badOutput(program: String)
    case notAbsolute

    public var description: String {
        switch self {
        case .couldNotRun(let program, let errno): "the picker \(Printable.message(program)) could not be run: \(errno)"
        case .badOutput(let program):
            "the picker \(Printable.message(program)) printed something other than one path and a newline (at most \(AskpassPicker.outputLimit) bytes, no NUL)"
        case .notAbsolute: "the picker printed a relative path: it must print an absolute one"
        }
    }
}

/// What the broker does for one sandbox's requests (`LiveGrantBroker.handler`):
/// asks the person through the picker (never taking a path from the
/// command), checks the folder as `pick` does (links an app could have
/// planted are not followed, protected folders refused), records the grant
/// in the ledger, and has the grant helper attach it; the grant counts only
/// once it is attached. The policy caps the access.
public final class LiveGrantService: @unchecked Sendable {
    let session: SandboxSession
    let app: AppID
    let policy: Policy
    let picker: AskpassPicker?
    /// Prompts allowed in a burst, and how fast they come back: a command
    /// cannot flood the person with pickers.
    static let burst = 3.0, perSecond = 0.5
    private var tokens = LiveGrantService.burst
    private var last = LiveGrantService.now()

    public init(session: SandboxSession, app: AppID, policy: Policy, picker: AskpassPicker?) {
        self.session = session
        self.app = app
        self.policy = policy
        self.picker = picker
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    public func handle(_ request: LiveGrantRequest, area: LiveGrantArea?) -> LiveGrantReply {
        guard let picker else {
            return LiveGrantReply(status: .noPicker, message: "nobody to ask: the sandbox was started without a picker (run --picker PROGRAM)")
        }
        guard let area else {
            return LiveGrantReply(status: .unavailable, message: "live grants need the private view; this sandbox runs in the host view")
        }
        guard policy.userSelectedAccess != nil else {
            return LiveGrantReply(status: .unavailable, message: "policy \(policy.source) takes no user-selected folders")
        }
        let now = Self.now()
        tokens = min(Self.burst, tokens + (now - last) * Self.perSecond)
        last = now
        guard tokens >= 1 else { return LiveGrantReply(status: .busy, message: "too many requests: the person is not asked again yet") }
        tokens -= 1
        let access: GrantAccess = request.readOnly || policy.userSelectedAccess != .readWrite ? .readOnly : .readWrite
        let asked = Printable.path(String(decoding: request.prompt, as: UTF8.self), limit: AskpassPicker.promptLimit)
        let prompt = "\(app) asks for a folder (\(access.rawValue))" + (asked.isEmpty ? "" : ": " + asked)
        do {
            guard let chosen = try picker.choose(prompt: prompt) else {
                return LiveGrantReply(status: .cancelled, message: "the person chose no folder")
            }
            let path = FilePath(bytes: chosen)
            guard path.isAbsolute else { throw LiveGrantPickerError.notAbsolute }
            let folder = try session.folder(path) { problem in GrantError.bookmarkFile(path: Printable.path(path), problem: problem) }
            var reached: FilePath?
            _ = try session.broker().grant(app: app, opened: folder, access: access) { _ in
                reached = try area.attach(folder, writable: access == .readWrite)
            }
            guard let reached else { return LiveGrantReply(status: .refused, message: "the folder was not attached") }
            return LiveGrantReply(status: .granted, text: reached.bytes)
        } catch {
            return LiveGrantReply(status: .refused, message: "\(error)")
        }
    }
}

extension SandboxSession {
    /// The live-grant handler for a launch of `app` under `policy`.
    public func liveGrantService(app: AppID, policy: Policy, picker: AskpassPicker?) -> LiveGrantService {
        LiveGrantService(session: self, app: app, policy: policy, picker: picker)
    }
}

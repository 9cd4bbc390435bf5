@preconcurrency import Glibc
import CSandbox
import SystemPackage

/// Collects the denials of one launch: prints each distinct one once on the
/// terminal (`--explain`), appends each to a JSON-lines log (`--denials`),
/// and counts them all for the closing line. Memory and output are bounded
/// whatever the command does: a hostile command can make millions of
/// distinct denials, but the table holds `distinctLimit` and the log
/// `logLimit` records, then counts only.
public final class DenialReporter: @unchecked Sendable {
    /// Where `--explain` prints (the launcher's stderr), or nil.
    let terminal: CInt?
    /// The `--denials` log, opened and checked by `DenialLog.open`.
    let log: OwnedDescriptor?
    public static let distinctLimit = 4096
    public static let logLimit = 100_000

    public private(set) var total = 0
    public private(set) var byOperation: [Denial.Operation: Int] = [:]
    /// Distinct denials and how often each happened, in first-seen order.
    private var seen: [Denial: Int] = [:]
    private var order: [Denial] = []
    private var unlisted = 0
    private var logged = 0
    private var logFailed = false

    public init(terminal: CInt?, log: OwnedDescriptor?) {
        self.terminal = terminal
        self.log = log
    }

    /// Whether anything beyond counting was asked for (the observer runs only then).
    public var explains: Bool { terminal != nil || log != nil }

    public func record(_ denial: Denial) {
        total += 1
        byOperation[denial.operation, default: 0] += 1
        if let count = seen[denial] {
            seen[denial] = count + 1
        } else if seen.count < Self.distinctLimit {
            seen[denial] = 1
            order.append(denial)
            if let terminal { Self.write("sandboxed-run: \(denial.message)\n", to: terminal) }
        } else {
            unlisted += 1
        }
        guard let log, !logFailed else { return }
        if logged < Self.logLimit {
            logged += 1
            logFailed = !Self.write(denial.json + "\n", to: log.rawValue)
        } else if logged == Self.logLimit {
            logged += 1
            logFailed = !Self.write(JSONText.object([("limit", String(Self.logLimit)), ("type", JSONText.quote("truncated"))]) + "\n", to: log.rawValue)
        }
    }

    /// "3 denials (2 reads, 1 write)".
    public var countText: String {
        let parts = [Denial.Operation.read, .write, .execute, .metadata, .syscall, .network].compactMap { operation -> String? in
            guard let count = byOperation[operation], count > 0 else { return nil }
            let noun = operation == .network ? "network" : operation.rawValue
            return "\(count) \(noun)\(count == 1 || operation == .network ? "" : "s")"
        }
        return "\(total) denial\(total == 1 ? "" : "s") (\(parts.joined(separator: ", ")))"
    }

    /// The closing line when the command failed after denials, nil otherwise;
    /// also writes the log's final record (always, when there is a log).
    public func finish(_ termination: Termination) -> String? {
        if let log, !logFailed {
            var fields: [(String, String)] = [("denials", String(total))]
            for operation in [Denial.Operation.execute, .metadata, .network, .read, .syscall, .write] {
                fields.append((operation.rawValue + "s", String(byOperation[operation] ?? 0)))
            }
            switch termination {
            case .exited(let code): fields.insert(("exit", String(code)), at: 1)
            case .signaled(let signal): fields.append(("signal", String(signal)))
            }
            fields.append(("type", JSONText.quote("end")))
            _ = Self.write(JSONText.object(fields) + "\n", to: log.rawValue)
        }
        guard termination != .exited(0), total > 0 else { return nil }
        let how = switch termination {
        case .exited(let code): "exit \(code)"
        case .signaled(let signal): "killed by signal \(signal)"
        }
        if terminal != nil {
            let repeated = seen.values.reduce(0) { $0 + $1 - 1 }
            var text = "\(how) after \(countText), \(order.count) distinct shown above"
            if repeated > 0 { text += " (\(repeated) repeats not shown)" }
            if unlisted > 0 { text += " (\(unlisted) more beyond \(Self.distinctLimit) distinct, counted only)" }
            return text
        }
        return "\(how) after \(countText); run with --explain to see them"
    }

    /// The distinct denials seen, with their counts, in order.
    public var distinct: [(Denial, Int)] { order.map { ($0, seen[$0] ?? 0) } }

    @discardableResult
    static func write(_ text: String, to fd: CInt) -> Bool {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            bytes = bytes.dropFirst(written)
        }
        return true
    }
}

/// The `--denials FILE` log: the user's file, opened by the launcher before
/// the launch. Refused when it is anything but a regular file with one name,
/// or when it lies where the sandbox can read or write (a grant, the
/// container, a system path): the command could then rewrite its own log.
public enum DenialLog {
    public static func open(_ path: FilePath) throws(SandboxError) -> OwnedDescriptor {
        let notRegular = SandboxError.usage("--denials \(Printable.path(bytes: path.bytes)): not a regular file (a FIFO, device or folder); name a new or regular file")
        // Looked at before opening it: opening a device can have effects of its own.
        let probe = path.withPlatformString { csb_open_path(AT_FDCWD, $0, 0) }
        if probe >= 0 {
            let existing = OwnedDescriptor(taking: probe)
            guard let status = try? existing.status(), (status.st_mode & S_IFMT) == S_IFREG || (status.st_mode & S_IFMT) == S_IFLNK else { throw notRegular }
        }
        // No O_TRUNC yet: a file in a grant must be refused untouched.
        let flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY
        let fd = path.withPlatformString { Glibc.open($0, flags, 0o600) }
        guard fd >= 0 else {
            let error = Errno(rawValue: errno)
            if error.rawValue == ENXIO { throw notRegular }  // a FIFO swapped in: O_NONBLOCK
            let why = error == .tooManySymbolicLinkLevels ? "it is a symbolic link; name the file itself" : error.description
            throw .usage("--denials \(Printable.path(bytes: path.bytes)): \(why)")
        }
        let file = OwnedDescriptor(taking: fd)
        guard let status = try? file.status(), (status.st_mode & S_IFMT) == S_IFREG else { throw notRegular }
        guard status.st_nlink <= 1 else {
            throw .usage("--denials \(Printable.path(bytes: path.bytes)): the file has other names (hard links); name a file with one")
        }
        return file
    }

    /// Refuses a log the sandbox can reach, then empties it.
    static func check(_ log: OwnedDescriptor, against roots: [FolderRule]) throws(SandboxError) {
        let chain: [InodeIdentity]
        do { chain = try Ancestry.chain(of: log) } catch {
            throw .setup(step: "checking where the --denials file lies", errno: error)
        }
        for root in roots {
            guard let identity = try? root.descriptor.status().inodeIdentity else { continue }
            if chain.contains(identity) {
                let place = root.name == "system" ? "the policy's system path \(Printable.path(bytes: root.path.bytes))"
                    : root.name == "container" ? "the app's container" : "grant \(root.name)"
                throw .usage("--denials: the file lies in \(place), which the sandbox can reach: the command could rewrite its own log; put it outside")
            }
        }
        guard ftruncate(log.rawValue, 0) == 0 else { throw .setup(step: "emptying the --denials file", errno: Errno(rawValue: errno)) }
        _ = fcntl(log.rawValue, F_SETFL, O_WRONLY | O_APPEND)
    }
}

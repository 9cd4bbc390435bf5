@preconcurrency import Glibc
import CSyscalls
import Synchronization
import SystemPackage

/// Collects the denials of one launch: prints each distinct one once on the
/// terminal (`--explain`), appends each to a JSON-lines log (`--denials`),
/// and counts them all for the closing line. Memory and output are bounded
/// whatever the command does: a hostile command can make millions of
/// distinct denials, but the table holds `distinctLimit`, and the log
/// `logLimit` records and `logBytes` bytes (one record that says it was
/// cut and the closing record included), then counts only. Denials come
/// from several threads at once (the supervisor's, the observer's, the
/// network proxy's): one lock around its state.
public final class DenialReporter: @unchecked Sendable {
    private let lock = Mutex(())
    /// Where `--explain` prints (the launcher's stderr), or nil.
    let terminal: CInt?
    /// The `--denials` log, opened and checked by `DenialLog.open`.
    let log: OwnedDescriptor?
    public static let distinctLimit = 4096
    public static let logLimit = 100_000
    /// `--denials-limit`'s default: 16 MiB.
    public static let defaultLogBytes = 16 << 20
    /// The smallest `--denials-limit`: room for a few records and the two closing ones.
    public static let minimumLogBytes = 4096
    /// Kept free for the record that says the log was cut and the closing
    /// one: both are a few numbers long.
    static let closingBytes = 512
    /// The most the log may hold, in bytes.
    let logBytes: Int

    private var _total = 0
    private var _byOperation: [Denial.Operation: Int] = [:]
    private var _probes = 0
    public var total: Int { lock.withLock { _ in _total } }
    public var byOperation: [Denial.Operation: Int] { lock.withLock { _ in _byOperation } }
    /// How many of `total` were known probes (`Denial.probe`).
    public var probes: Int { lock.withLock { _ in _probes } }
    /// Distinct denials and how often each happened, in first-seen order.
    private var seen: [Denial: Int] = [:]
    private var order: [Denial] = []
    private var unlisted = 0
    private var logged = 0
    private var loggedBytes = 0
    private var logCut = false
    private var logFailed = false

    public init(terminal: CInt?, log: OwnedDescriptor?, logBytes: Int = DenialReporter.defaultLogBytes) {
        self.terminal = terminal
        self.log = log
        self.logBytes = max(logBytes, Self.minimumLogBytes)
    }

    /// Whether anything beyond counting was asked for (the observer runs only then).
    public var explains: Bool { terminal != nil || log != nil }

    public func record(_ denial: Denial) {
        // Written after the lock: a stderr nobody drains then blocks only the
        // thread that has a line to print, not every thread that records.
        let line = lock.withLock { _ in recordLocked(denial) }
        if let line, let terminal { Self.write(line, to: terminal) }
    }

    /// The line `--explain` prints for it, if any.
    private func recordLocked(_ denial: Denial) -> String? {
        _total += 1
        _byOperation[denial.operation, default: 0] += 1
        if denial.probe != nil { _probes += 1 }
        var shown: String?
        if let count = seen[denial] {
            seen[denial] = count + 1
        } else if seen.count < Self.distinctLimit {
            seen[denial] = 1
            order.append(denial)
            if terminal != nil { shown = "sandboxed-run: \(denial.message)\n" }
        } else {
            unlisted += 1
        }
        guard let log, !logFailed, !logCut else { return shown }
        let line = denial.json + "\n"
        let size = line.utf8.count
        if logged < Self.logLimit, loggedBytes + size + Self.closingBytes <= logBytes {
            logged += 1
            loggedBytes += size
            logFailed = !Self.write(line, to: log.rawValue)
            return shown
        }
        // Said once; the command runs on, and its denials are still counted.
        logCut = true
        let cut = JSONText.object([
            ("bytes", String(logBytes)), ("limit", String(Self.logLimit)), ("records", String(logged)),
            ("type", JSONText.quote("truncated")),
            ("why", JSONText.quote(logged >= Self.logLimit ? "record limit" : "byte limit")),
        ]) + "\n"
        loggedBytes += cut.utf8.count
        logFailed = !Self.write(cut, to: log.rawValue)
        return shown
    }

    static let operations: [Denial.Operation] = [.read, .write, .execute, .metadata, .syscall, .network, .rename, .link]

    /// "3 denials (2 reads, 1 write)", and how many were expected probes.
    public var countText: String { lock.withLock { _ in countTextLocked } }

    private var countTextLocked: String {
        let total = _total, probes = _probes, byOperation = _byOperation
        let parts = Self.operations.compactMap { operation -> String? in
            guard let count = byOperation[operation], count > 0 else { return nil }
            let noun = operation == .network ? "network" : operation.rawValue
            return "\(count) \(noun)\(count == 1 || operation == .network ? "" : "s")"
        }
        let marked = probes == 0 ? "" : "; \(probes) of them expected probe\(probes == 1 ? "" : "s")"
        return "\(total) denial\(total == 1 ? "" : "s") (\(parts.joined(separator: ", "))\(marked))"
    }

    /// The closing line when the command failed after denials, nil otherwise;
    /// also writes the log's final record (always, when there is a log).
    public func finish(_ termination: Termination) -> String? {
        lock.withLock { _ in finishLocked(termination) }
    }

    private func finishLocked(_ termination: Termination) -> String? {
        let total = _total, probes = _probes, byOperation = _byOperation
        if let log, !logFailed {
            var fields: [(String, String)] = [("denials", String(total)), ("probes", String(probes)), ("type", JSONText.quote("end"))]
            for operation in Self.operations {
                fields.append((operation.rawValue + "s", String(byOperation[operation] ?? 0)))
            }
            switch termination {
            case .exited(let code): fields.append(("exit", String(code)))
            case .signaled(let signal): fields.append(("signal", String(signal)))
            }
            _ = Self.write(JSONText.object(fields.sorted { $0.0 < $1.0 }) + "\n", to: log.rawValue)
        }
        // Probes alone did not make the command fail: no line to send the user after them.
        guard termination != .exited(0), total > probes else { return nil }
        let how = switch termination {
        case .exited(let code): "exit \(code)"
        case .signaled(let signal): "killed by signal \(signal)"
        }
        if terminal != nil {
            let repeated = seen.values.reduce(0) { $0 + $1 - 1 }
            var text = "\(how) after \(countTextLocked), \(order.count) distinct shown above"
            if repeated > 0 { text += " (\(repeated) repeats not shown)" }
            if unlisted > 0 { text += " (\(unlisted) more beyond \(Self.distinctLimit) distinct, counted only)" }
            return text
        }
        return "\(how) after \(countTextLocked), not explained"
    }

    /// The distinct denials seen, with their counts, in order.
    public var distinct: [(Denial, Int)] { lock.withLock { _ in order.map { ($0, seen[$0] ?? 0) } } }

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
    /// Opens (creating it 0600) the log at `path`, an absolute path. Its
    /// folder is found as every unconfined path is (`trust`: no link an app
    /// or another user could have planted is followed), and the log is
    /// refused where an app could write or once could (it would forge the
    /// log, or have the launcher append to a file of its choosing), and when
    /// someone else could have written it. Only a regular file with one name.
    public static func open(_ path: FilePath, trust: LinkTrust) throws(SandboxError) -> OwnedDescriptor {
        let notRegular = SandboxError.denialLog(path, "not a regular file (a FIFO, device or folder); name a new or regular file")
        guard path.isAbsolute, let leaf = path.lastComponent, leaf.kind == .regular else {
            throw .denialLog(path, "name a file by its absolute path")
        }
        let folder = try SafeWalk.openFolder(path.removingLastComponent(), trust: trust) { SandboxError.denialLog(path, "\($0)") }
        if let reason = trust.appMayHaveWritten(folder) {
            throw .denialLog(path, "it lies \(reason): the command could forge or redirect its own log; put it outside")
        }
        let name = FilePath(root: nil, [leaf])
        // Looked at before opening it: opening a device can have effects of its own.
        var named = stat()
        if name.withPlatformString({ fstatat(folder.rawValue, $0, &named, AT_SYMLINK_NOFOLLOW) }) == 0 {
            if named.st_mode & S_IFMT == S_IFLNK { throw .denialLog(path, "it is a symbolic link; name the file itself") }
            guard named.st_mode & S_IFMT == S_IFREG else { throw notRegular }
        }
        // No O_TRUNC yet: a file in a grant must be refused untouched.
        let flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY
        let fd = name.withPlatformString { openat(folder.rawValue, $0, flags, 0o600) }
        guard fd >= 0 else {
            let error = Errno(rawValue: errno)
            if error.rawValue == ENXIO { throw notRegular }  // a FIFO swapped in: O_NONBLOCK
            let why = error == .tooManySymbolicLinkLevels ? "it is a symbolic link; name the file itself" : error.description
            throw .denialLog(path, "\(why)")
        }
        let file = OwnedDescriptor(taking: fd)
        guard let status = try? file.status(), (status.st_mode & S_IFMT) == S_IFREG else { throw notRegular }
        guard status.st_nlink <= 1 else {
            throw .denialLog(path, "the file has other names (hard links); name a file with one")
        }
        if let reason = trust.ownershipRefusal(ofFile: status, in: folder) {
            throw .denialLog(path, "\(reason); name a file of your own")
        }
        return file
    }


    /// Refuses a log the sandbox can reach, then empties it.
    static func check(_ log: OwnedDescriptor, against roots: [PathRule]) throws(SandboxError) {
        let chain: [InodeIdentity]
        do { chain = try Ancestry.chain(of: log) } catch {
            if error == .fileNameTooLong { throw .denialLog(nil, PathLimit.exceeded + "; put it in a folder with a shorter path") }
            throw .setup(step: "checking where the denials log lies", errno: error)
        }
        // A staged grant's folder too: its clone's changes may be applied there.
        for root in roots {
            for identity in [root.descriptor, root.staged].compactMap({ try? $0?.status().inodeIdentity }) where chain.contains(identity) {
                let place = root.shownName
                throw .denialLog(nil, "the file lies in \(place), which the sandbox can reach: the command could rewrite its own log; put it outside")
            }
        }
        guard ftruncate(log.rawValue, 0) == 0 else { throw .setup(step: "emptying the denials log", errno: Errno(rawValue: errno)) }
        _ = fcntl(log.rawValue, F_SETFL, O_WRONLY | O_APPEND)
    }
}

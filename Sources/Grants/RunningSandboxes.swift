@preconcurrency import Glibc
import CSyscalls
import Sandbox
import SystemPackage

/// What a launcher records of its running sandbox while the sandbox holds
/// grants, so that `grants revoke` can say who still holds a folder.
public struct SandboxRecord: Sendable, Equatable {
    /// One grant the sandbox holds.
    public struct Held: Sendable, Equatable {
        public let grant: GrantID
        public let path: FilePath
        /// How the sandbox came to hold it.
        public let origin: Origin
        /// What revoking it does to the running sandbox.
        public let revocation: Revocation

        public init(grant: GrantID, path: FilePath, origin: Origin, revocation: Revocation) {
            self.grant = grant
            self.path = path
            self.origin = origin
            self.revocation = revocation
        }
    }

    /// How a sandbox came to hold a grant. Kept apart from `Revocation`:
    /// in the private view a grant given at launch with a mount of its own
    /// is taken away as an attached one is, yet it was not attached.
    public enum Origin: String, Sendable, Equatable {
        /// Given when the sandbox was launched (`run --grant`).
        case launch
        /// Attached in the grant area while the sandbox runs (an open panel, `start-accessing`).
        case attached
        /// Read from a format 1 record (an earlier sandboxed-run's), whose
        /// "detachable" was either. Never written.
        case unrecorded
    }

    /// What a revocation does to a running sandbox that holds the grant.
    public enum Revocation: String, Sendable, Equatable {
        /// Its launcher detaches the folder: new lookups in it fail at once.
        case takenAway = "taken-away"
        /// It stays reachable until the sandbox ends: a Landlock rule (host
        /// view), which cannot be taken back from a running command, or a
        /// folder sharing a mount with one that stays (private view).
        case keptUntilEnd = "kept-until-end"
    }

    /// The launcher: the process to signal to end the sandbox.
    public let launcher: ProcessIdentity
    public var app: String
    public var view: FileSystemView
    public var grants: [Held]
    /// The command and its arguments as given (capped: `commandLimit`);
    /// shown escaped, since whoever named the files in it chose its bytes.
    public var command: [[UInt8]]
    /// Arguments left out beyond the cap.
    public var omittedArguments: Int
    /// Set when the launcher ends its sandbox because a revoked folder
    /// could not be taken away: the record then stays after the launcher
    /// exits, so that `grants revoke` can say why (it removes it).
    public var ending: Ending?

    /// Why a launcher ended its sandbox for a revocation.
    public enum Ending: Sendable, Equatable {
        /// The command held the folder (a descriptor or working directory
        /// in it, a file open there), and a folder is never detached under it.
        case held
        /// Taking the folder away failed (the launcher's words).
        case failed(String)
    }

    /// The most bytes of the command line a record keeps.
    public static let commandLimit = 4096
    /// The most grants a record holds (the live-grant cap is 256 a sandbox).
    public static let grantLimit = 1024
    /// The largest record file read: 1024 grants with 4096-byte paths, in hex.
    static let fileLimit = 9 << 20

    public init(launcher: ProcessIdentity, app: String, view: FileSystemView, grants: [Held], command: [[UInt8]]) {
        self.launcher = launcher
        self.app = app
        self.view = view
        self.grants = grants
        var kept: [[UInt8]] = []
        var bytes = 0
        for argument in command {
            if bytes + argument.count > Self.commandLimit { break }
            bytes += argument.count
            kept.append(argument)
        }
        self.command = kept
        omittedArguments = command.count - kept.count
    }

    /// The file's name: unique to the launcher.
    var fileName: String { "\(launcher.pidNamespace)-\(launcher.pid)-\(launcher.startTime)" }

    /// Version 3 may say why the launcher ended its sandbox ("ending");
    /// version 2 says how each grant came and what revoking it does;
    /// version 1 said only "fixed" or "detachable" (see `decode`).
    static let magic = "sandboxed-run-running 3"
    static let version2Magic = "sandboxed-run-running 2"
    static let olderMagic = "sandboxed-run-running 1"
    /// The longest reason kept in an "ending" line.
    static let endingLimit = 1024

    /// A grant line's words after the id, as format 1 wrote them: "fixed"
    /// was only ever a launch-time grant kept until the end; "detachable"
    /// was taken away, but attached or given at launch alike.
    static func olderKind(_ word: String) -> (Origin, Revocation)? {
        switch word {
        case "fixed": (.launch, .keptUntilEnd)
        case "detachable": (.unrecorded, .takenAway)
        default: nil
        }
    }

    /// One line per field, bytes in hex: no value can break a line or be
    /// read as another field.
    func encoded() -> [UInt8] {
        var lines = [Self.magic, "boot \(launcher.boot)", "pidns \(launcher.pidNamespace)", "pid \(launcher.pid)",
                     "start \(launcher.startTime)", "app \(Printable.hex(Array(app.utf8)))", "view \(view.rawValue)"]
        for held in grants { lines.append("grant \(held.grant.hex) \(held.origin.rawValue) \(held.revocation.rawValue) \(Printable.hex(held.path.bytes))") }
        for argument in command { lines.append("arg \(Printable.hex(argument))") }
        if omittedArguments > 0 { lines.append("omitted \(omittedArguments)") }
        switch ending {
        case .held: lines.append("ending held")
        case .failed(let reason): lines.append("ending failed \(Printable.hex(Array(reason.utf8.prefix(Self.endingLimit))))")
        case nil: break
        }
        lines.append("end")
        // Not `joined(separator:)`: its first use scans every conformance record of the binary, at a launch with a grant.
        var bytes: [UInt8] = []
        for line in lines { bytes += Array(line.utf8) + [UInt8(ascii: "\n")] }
        return bytes
    }

    /// Parses a record, strictly: every line known, every field once, in
    /// bounds; nil with the reason otherwise.
    static func decode(_ bytes: [UInt8]) -> Result<SandboxRecord, Malformed> {
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        // Format 1 is still read: a sandbox launched before an update is
        // named and can be ended, and a record its killed launcher left is
        // pruned, instead of every `holders` and `revoke` failing on it
        // (every sandboxed-run the user runs shares the runtime folder).
        let older = lines.first == olderMagic
        guard older || lines.first == magic || lines.first == version2Magic else { return .failure(.init("does not start with \"\(magic)\"")) }
        guard lines.count >= 2, lines[lines.count - 1].isEmpty, lines[lines.count - 2] == "end" else {
            return .failure(.init("does not end with an \"end\" line (cut short?)"))
        }
        var fields: [String: String] = [:]
        var grants: [Held] = []
        var command: [[UInt8]] = []
        var commandBytes = 0
        var ending: Ending?
        for (number, line) in lines[1..<(lines.count - 2)].enumerated() {
            let words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            let at = "line \(number + 2)"
            switch words.first {
            case "boot", "pidns", "pid", "start", "app", "view", "omitted":
                guard words.count == 2, fields[words[0]] == nil else { return .failure(.init("\(at): a \(words[0]) line given twice or not of two words")) }
                fields[words[0]] = words[1]
            case "grant":
                // An attached grant is always taken away: "attached kept-until-end" names nothing a launcher writes.
                let kind = older
                    ? (words.count == 4 ? olderKind(words[2]) : nil)
                    : (words.count == 5 ? Origin(rawValue: words[2]).flatMap { origin in Revocation(rawValue: words[3]).map { (origin, $0) } } : nil)
                guard let (origin, revocation) = kind, older || origin != .unrecorded, origin != .attached || revocation == .takenAway,
                      let id = Keyring.decodeHex(words[1]), id.count == 32, let path = Keyring.decodeHex(words[words.count - 1]),
                      !path.isEmpty, path.count <= Int(PATH_MAX), !path.contains(0) else {
                    return .failure(.init(older ? "\(at): not a grant (id, fixed or detachable, path)"
                                                : "\(at): not a grant (id, launch or attached, taken-away or kept-until-end, path)"))
                }
                guard grants.count < grantLimit else { return .failure(.init("more than \(grantLimit) grants")) }
                grants.append(Held(grant: GrantID(digest: id), path: FilePath(bytes: path), origin: origin, revocation: revocation))
            case "arg":
                guard words.count == 2, let argument = Keyring.decodeHex(words[1]), !argument.contains(0) else {
                    return .failure(.init("\(at): not an argument"))
                }
                commandBytes += argument.count
                guard commandBytes <= commandLimit else { return .failure(.init("a command line longer than \(commandLimit) bytes")) }
                command.append(argument)
            case "ending" where lines.first == magic:
                guard ending == nil else { return .failure(.init("\(at): an ending line given twice")) }
                if words == ["ending", "held"] {
                    ending = .held
                } else if words.count == 3, words[1] == "failed", let reason = Keyring.decodeHex(words[2]), reason.count <= endingLimit {
                    ending = .failed(String(decoding: reason, as: UTF8.self))
                } else {
                    return .failure(.init("\(at): not an ending (held, or failed and a reason)"))
                }
            default:
                return .failure(.init("\(at): unknown"))
            }
        }
        func number<T: FixedWidthInteger>(_ name: String, _ type: T.Type, minimum: T) -> T? {
            guard let text = fields[name], !text.isEmpty, text.count <= 20, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let value = T(text), value >= minimum else { return nil }
            return value
        }
        guard let boot = fields["boot"], boot.utf8.count == 36,
              let pidns = number("pidns", UInt64.self, minimum: 1), let pid = number("pid", Int32.self, minimum: 1),
              let start = number("start", UInt64.self, minimum: 0) else {
            return .failure(.init("the launcher's boot, pidns, pid or start is missing or not a number"))
        }
        guard let appHex = fields["app"], let appBytes = Keyring.decodeHex(appHex), let app = String(validating: appBytes, as: UTF8.self),
              (try? AppID(app)) != nil else {
            return .failure(.init("the app is missing or not an app id"))
        }
        guard let viewName = fields["view"], let view = FileSystemView(rawValue: viewName) else {
            return .failure(.init("the view is missing or neither host nor private"))
        }
        let omitted = fields["omitted"] == nil ? 0 : number("omitted", Int.self, minimum: 1)
        guard let omitted else { return .failure(.init("omitted is not a number")) }
        var record = SandboxRecord(
            launcher: ProcessIdentity(boot: boot, pidNamespace: pidns, pid: pid, startTime: start), app: app, view: view, grants: grants,
            command: command)
        record.omittedArguments = omitted
        record.ending = ending
        return .success(record)
    }

    struct Malformed: Error {
        let problem: String
        init(_ problem: String) { self.problem = problem }
    }
}

/// The records of running sandboxes: `running/` in the state folder, one
/// file per launcher, which no sandbox can write (no rule may expose it).
/// They are runtime state, not durable state: written once, never synced,
/// since a reboot ends every sandbox they describe (and the boot id in each
/// says so).
/// Read with the distrust of every state file: the folder and each file
/// must be the user's, private, real (no link, FIFO or device) and in
/// bounds; anything else is an error naming the file. A record is believed
/// only while its launcher runs: the boot, pid namespace, pid and start
/// time must all match, so a launcher killed before it could remove its
/// record (SIGKILL) leaves a record that names nobody, whatever process gets
/// its pid later.
public struct RunningSandboxes: Sendable {
    /// The folder holding `running/` (the state folder).
    let base: StateDirectory
    static let folderName = "running"
    var folderPath: String { base.path + "/" + Self.folderName }

    /// `folder`: the state folder (it holds `running/`).
    public init(folder: StateDirectory) {
        base = folder
    }

    /// Where the records are kept.
    public var path: String { folderPath }

    /// What the folder holds now.
    public struct Survey: Sendable {
        /// Records whose launcher runs.
        public var running: [SandboxRecord] = []
        /// Records whose launcher ended without removing them (removed now, when `prune`).
        public var stale = 0
        /// Records made in another pid namespace: nothing can be said of them from here.
        public var elsewhere: [SandboxRecord] = []
        /// Records of launchers that ended (or are ending) their sandbox
        /// for a revocation, saying why; not in `running`. Kept for
        /// `grants revoke` to read, and removed when older than `endingKept`.
        public var ending: [SandboxRecord] = []
    }

    /// How long a record saying why its sandbox ended is kept after its launcher exited, unless `grants revoke` reads it first.
    public static let endingKept: Int = 120

    private func folder(create: Bool) throws(GrantError) -> OwnedDescriptor? {
        let fd: OwnedDescriptor
        do {
            fd = try StateDirectory.openFolder(Self.folderName, in: base.descriptor, create: create)
        } catch .noSuchFileOrDirectory {
            return nil
        } catch .tooManySymbolicLinkLevels, .notDirectory {
            throw StateDirectory.notARealFolder(Self.folderName, in: base.descriptor, path: folderPath)
        } catch {
            throw .stateDirectory(step: "opening \(folderPath)", errno: error)
        }
        let st: stat
        do { st = try fd.status() } catch { throw .stateDirectory(step: "reading \(folderPath)", errno: error) }
        try StateDirectory.checkPrivate(st, path: folderPath, kind: S_IFDIR)
        return fd
    }

    /// Writes `record` whole (a new file linked or renamed over the old), so
    /// a reader sees the old record or the new. Not synced: see the type.
    /// Where the disk is full (the fallback folder is the state folder, on
    /// the filesystem the command writes), the record goes into `spare`,
    /// which is then used up.
    public func write(_ record: SandboxRecord, spare: inout RecordSpare?) throws(GrantError) {
        guard let folder = try folder(create: true) else { throw .stateDirectory(step: "making \(folderPath)", errno: .noSuchFileOrDirectory) }
        guard record.grants.count <= SandboxRecord.grantLimit else {
            throw .stateDirectory(step: "recording more than \(SandboxRecord.grantLimit) grants of one sandbox", errno: .fileTooLarge)
        }
        let bytes = record.encoded()
        do {
            try AtomicFile.replace(record.fileName, in: folder, with: bytes, mode: 0o600, durable: false)
        } catch let error where (error == .noSpace || error == .diskQuotaExceeded) && spare != nil && bytes.count <= RecordSpare.size {
            do { try spare!.replace(record.fileName, in: folder, with: bytes) } catch {
                throw .stateDirectory(step: "writing \(folderPath)/\(record.fileName) (into the space kept for it: the disk is full)", errno: error)
            }
            spare = nil
        } catch {
            throw .stateDirectory(step: "writing \(folderPath)/\(record.fileName)", errno: error)
        }
    }

    /// `write` without a spare.
    public func write(_ record: SandboxRecord) throws(GrantError) {
        var none: RecordSpare?
        try write(record, spare: &none)
    }

    /// Room for one rewrite of a record on a full disk, made now (while
    /// there is room); nil where it cannot be made.
    public func makeSpare() -> RecordSpare? {
        guard let folder = try? folder(create: true) else { return nil }
        return RecordSpare(in: folder)
    }

    /// Removes the record of `launcher`. Not synced: a record that outlives
    /// a crash of the machine names a launcher of another boot, which is gone.
    public func remove(_ launcher: ProcessIdentity) {
        guard let folder = try? folder(create: false) else { return }
        let name = "\(launcher.pidNamespace)-\(launcher.pid)-\(launcher.startTime)"
        unlinkat(folder.rawValue, name, 0)
    }

    /// Every record, its launcher checked. With `prune`, records whose
    /// launcher is gone are removed (it can no longer remove them).
    public func survey(prune: Bool = true) throws(GrantError) -> Survey {
        var survey = Survey()
        guard let folder = try folder(create: false) else { return survey }
        let names: [[UInt8]]
        do { names = try Self.names(in: folder) } catch { throw .stateDirectory(step: "listing \(folderPath)", errno: error) }
        for raw in names {
            // A write in progress (or cut short by a crash) where O_TMPFILE is not to be had.
            if String(decoding: raw, as: UTF8.self).contains(".tmp-") { continue }
            let name = String(decoding: raw, as: UTF8.self)
            let path = folderPath + "/" + Printable.path(bytes: raw)
            guard String(validating: raw, as: UTF8.self) != nil, raw.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }) else {
                throw .damagedState(path: path, problem: "is not a record of a running sandbox (its name is not PIDNS-PID-START)",
                                    fix: "Move it out of \(folderPath).")
            }
            guard let file = try StateDirectory.openPrivateFile(name, in: folder, path: path) else { continue }  // removed meanwhile
            let bytes: [UInt8]
            do { bytes = try StateDirectory.readAll(file.descriptor, limit: SandboxRecord.fileLimit) } catch {
                throw error == .fileTooLarge
                    ? .damagedState(path: path, problem: "is larger than \(SandboxRecord.fileLimit) bytes: not a record sandboxed-run wrote", fix: "Move it out of \(folderPath).")
                    : .stateDirectory(step: "reading \(path)", errno: error)
            }
            let record: SandboxRecord
            switch SandboxRecord.decode(bytes) {
            case .success(let decoded): record = decoded
            case .failure(let malformed):
                throw .damagedState(path: path, problem: "is not a well-formed record of a running sandbox: \(malformed.problem)",
                                    fix: "Move it out of \(folderPath); check with `ps` whether that sandbox still runs.")
            }
            guard record.fileName == name else {
                throw .damagedState(path: path, problem: "names another launcher (\(record.fileName)) than its file name says",
                                    fix: "Move it out of \(folderPath).")
            }
            let state: ProcessIdentity.State
            do { state = try record.launcher.state() } catch { throw .stateDirectory(step: "checking the launcher of \(path)", errno: error) }
            switch state {
            case .running where record.ending != nil: survey.ending.append(record)
            case .running: survey.running.append(record)
            case .elsewhere: survey.elsewhere.append(record)
            case .gone where record.ending != nil:
                survey.ending.append(record)
                if prune, Int(time(nil)) - file.status.st_mtim.tv_sec > Self.endingKept {
                    unlinkat(folder.rawValue, name, 0)
                }
            case .gone:
                survey.stale += 1
                if prune { unlinkat(folder.rawValue, name, 0) }
            }
        }
        survey.running.sort { ($0.app, $0.launcher.pid) < ($1.app, $1.launcher.pid) }
        return survey
    }

    /// How ending a sandbox went.
    public enum Ending: Sendable, Equatable {
        /// Its launcher ended the sandbox and exited after SIGTERM.
        case ended
        /// It did not end within the grace period: its launcher was killed
        /// (SIGKILL), and the kernel ends the sandbox with it.
        case killed
        /// It had ended already (nothing was signalled).
        case gone
        /// It could not be signalled or did not end.
        case failed(Errno)
    }

    /// Ends the sandbox `record` names: its launcher, verified by a pidfd
    /// (see `ProcessIdentity.open`), gets SIGTERM, which it forwards to the
    /// sandbox and exits when the sandbox has ended; after `grace` seconds
    /// SIGKILL. Nothing is signalled that is not that launcher.
    public func end(_ record: SandboxRecord, grace: Double) -> Ending {
        let pidfd: OwnedDescriptor?
        do { pidfd = try record.launcher.open() } catch { return .failed(error) }
        guard let pidfd else { return .gone }
        // A pidfd polls readable once its process has exited.
        func exited(within seconds: Double) -> Bool {
            var fds = [pollfd(fd: pidfd.rawValue, events: Int16(POLLIN), revents: 0)]
            let deadline = Self.now() + seconds
            while true {
                let ready = poll(&fds, 1, CInt(max(0, deadline - Self.now()) * 1000))
                if ready < 0 && errno == EINTR { continue }
                return ready > 0
            }
        }
        if csb_pidfd_send_signal(pidfd.rawValue, SIGTERM) != 0 {
            return errno == ESRCH ? .gone : .failed(Errno(rawValue: errno))
        }
        if exited(within: grace) { return .ended }
        if csb_pidfd_send_signal(pidfd.rawValue, SIGKILL) != 0, errno != ESRCH { return .failed(Errno(rawValue: errno)) }
        guard exited(within: 10) else { return .failed(.timedOut) }
        // It could not remove its record.
        remove(record.launcher)
        return .killed
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The names in a folder reached by descriptor, as bytes.
    static func names(in folder: OwnedDescriptor) throws(Errno) -> [[UInt8]] {
        let readable = try folder.reopenedFolder()
        let dir = try directoryStream(taking: readable)  // a fresh open: the stream can have it
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let raw = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if raw != [0x2E], raw != [0x2E, 0x2E] { names.append(raw) }
        }
        return names
    }
}

extension GrantBroker {
    /// The records of running sandboxes in this broker's state folder (the
    /// folder it already opened and checked: no second walk to it).
    public var runningSandboxes: RunningSandboxes { RunningSandboxes(folder: state) }
}

/// Space for one rewrite of a running sandbox's record where the disk is
/// full: an unnamed file (O_TMPFILE) in `running/`, written whole ahead of
/// time and held open by the launcher. A rewrite that finds no room puts
/// the record into its blocks (pwrite, then ftruncate, which only frees),
/// links it in and renames it over the record, so that a folder detached
/// on a full disk is not still named in the record (`revoke` would then
/// wait for it and report it not yet cut). A launcher killed leaves nothing
/// behind: the file has no name until it is used.
public final class RecordSpare: @unchecked Sendable {
    /// Far above a record of a few dozen grants.
    public static let size = 64 << 10
    private let file: OwnedDescriptor

    init?(in folder: OwnedDescriptor) {
        // O_TMPFILE (hidden by Glibc): __O_TMPFILE | O_DIRECTORY.
        let fd = openat(folder.rawValue, ".", 0o20000000 | O_DIRECTORY | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return nil }
        file = OwnedDescriptor(taking: fd)
        // Real blocks: written, not a hole (nothing to allocate when it is used).
        let zeros = [UInt8](repeating: 0, count: Self.size)
        var done = 0
        while done < zeros.count {
            let wrote = zeros.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, zeros.count - done) }
            if wrote < 0 && errno == EINTR { continue }
            guard wrote > 0 else { return nil }
            done += wrote
        }
    }

    /// Becomes `name` in `folder`, holding `bytes`.
    func replace(_ name: String, in folder: OwnedDescriptor, with bytes: [UInt8]) throws(Errno) {
        var done = 0
        while done < bytes.count {
            done += try syscallRetrying { bytes.withUnsafeBytes { pwrite(file.rawValue, $0.baseAddress! + done, bytes.count - done, off_t(done)) } }
        }
        _ = try syscallRetrying { ftruncate(file.rawValue, off_t(bytes.count)) }
        let temporary = name + ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        _ = try syscallRetrying { linkat(AT_FDCWD, "/proc/self/fd/\(file.rawValue)", folder.rawValue, temporary, AT_SYMLINK_FOLLOW) }
        do {
            _ = try syscallRetrying { renameat(folder.rawValue, temporary, folder.rawValue, name) }
        } catch {
            unlinkat(folder.rawValue, temporary, 0)
            throw error
        }
    }
}

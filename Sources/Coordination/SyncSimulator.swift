@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// A sync daemon to test writers against. It follows the coordination
/// protocol (or, with `naive`, ignores it to show the failure): it uploads
/// (reads) files that changed, applies remote edits by rewriting whole files
/// (temporary file, rename over), evicts files to placeholders and
/// materialises them again (at random, and whenever a writer asks with
/// `.NAME.icloud.download`), and keeps the losing side of concurrent changes
/// as conflict versions. The folder's contents are hostile: it never follows
/// a link, never opens anything but a regular file, skips files over 16 MiB,
/// and looks at most 10,000 entries 8 folders deep.
public final class SyncSimulator {
    public struct Options: Sendable {
        public var seed: UInt64 = 1
        /// Remote edits per second (0: none).
        public var editRate = 1.0
        /// Evictions, and random materialisations, per second (0: none).
        public var evictRate = 0.0
        /// Concurrent changes per second that end in a conflict version (0: none).
        public var conflictRate = 0.0
        /// Ignore the protocol: read, wait, rename over, without locks.
        public var naive = false
        /// How long a naive edit takes between reading and writing back (the network).
        public var naiveLatency: Duration = .milliseconds(2)
        /// At a clean stop, bring back every file still evicted (else leave the placeholders).
        public var restoreOnStop = true
        /// Told once per file and problem when the simulator leaves something
        /// alone that a person should look at (another protocol version's
        /// placeholder, a stub with no data, a link where a stub should be).
        public var report: (@Sendable (String) -> Void)?
        public init() {}
    }

    public struct Counts: Sendable, Equatable {
        public var uploads = 0, edits = 0, evictions = 0, materialisations = 0, conflicts = 0, skipped = 0
        /// Temporary files that killed parties left, removed.
        public var leftovers = 0
        /// Files left alone for a person to look at, each counted once (see `Options.report`).
        public var refused = 0
        public init() {}
    }

    public let root: FilePath
    public let options: Options
    public private(set) var counts = Counts()
    private var random: SplitMix
    private let coordinator = FileCoordinator(timeout: .seconds(5))
    /// What each file held when last uploaded: the base of a remote change.
    /// The folder is hostile (sparse files cost no disk): contents are kept
    /// only within `uploadBudget` in all, and only for files still there.
    private var uploaded: [FilePath: (contents: [UInt8]?, modified: timespec)] = [:]
    private var uploadedBytes = 0
    static let uploadBudget = 64 << 20
    private var editNumber = 0
    private var evictedAt: [FilePath: ContinuousClock.Instant] = [:]
    private var reported: Set<String> = []

    static let largest = 16 << 20
    static let maxEntries = 10_000
    static let maxDepth = 8
    /// Every file found keeps its folder open until the next scan: a vault
    /// of thousands of folders must not use up the process's descriptors.
    static let maxFolders = 256
    /// How long an eviction or a materialisation waits for the folder lock
    /// before trying later: writers hold it for microseconds, and an app
    /// that holds it for ever must not stall the daemon.
    static let folderWait: Duration = .milliseconds(50)

    private let opened: OwnedDescriptor?

    /// `descriptor`: the folder, already opened by a caller that walked its path safely.
    public init(folder: FilePath, descriptor: OwnedDescriptor? = nil, options: Options = Options()) {
        root = folder
        opened = descriptor
        self.options = options
        random = SplitMix(seed: options.seed)
    }

    /// Runs until `shouldStop` says so, then (unless `restoreOnStop` is off)
    /// brings every evicted file back, and returns the counts.
    public func run(tick: Duration = .milliseconds(5), shouldStop: () -> Bool) throws -> Counts {
        let rootFolder: OwnedDescriptor
        if let opened {
            rootFolder = opened
        } else {
            do { rootFolder = try .openPath(root, follow: true) } catch {
                throw CoordinationError.system(operation: "opening", path: root, errno: error)
            }
        }
        let seconds = FileCoordinator.seconds(tick)
        var scanned = scan(rootFolder)
        var lastScan = ContinuousClock.now
        tidy(scanned)
        while !shouldStop() {
            if ContinuousClock.now - lastScan > .milliseconds(100) {
                scanned = scan(rootFolder)
                lastScan = ContinuousClock.now
                forgetUploads(except: scanned.files)
                tidy(scanned)
                scanned.unsettled = []
                scanned.leftovers = []
                scanned.refusals = []
            }
            for request in scanned.requests { settle(request) }
            scanned.requests = []
            for file in scanned.files where changedSinceUpload(file) { upload(file) }
            if happens(options.editRate * seconds), let file = pick(scanned.files) { edit(file) }
            if happens(options.conflictRate * seconds), let file = pick(scanned.files) { conflict(file) }
            if happens(options.evictRate * seconds), let file = pick(scanned.files) {
                evict(file)
                scanned.files.removeAll { $0.path == file.path }
            }
            // A file this run evicted stays a placeholder for a second at least, as a real one would.
            let downloadable = scanned.evicted.filter { evictedAt[$0.path].map { ContinuousClock.now - $0 > .seconds(1) } ?? true }
            if happens(options.evictRate * seconds), let stub = pick(downloadable) {
                settle(stub)
                scanned.evicted.removeAll { $0.path == stub.path }
            }
            usleep(useconds_t(seconds * 1_000_000))
        }
        // A clean stop: every placeholder ours becomes a file again.
        if options.restoreOnStop {
            let last = scan(rootFolder)
            tidy(last)
            for item in last.evicted + last.requests { settle(item) }
            // What killed parties left where no scan looks, swept under each item's write
            // lock: a temporary in the item's versions folder (a conflict version being
            // kept), and a staged journal (a writer killed before renaming it into place,
            // which readers do not look for: it describes no record yet).
            for file in scan(rootFolder).files { sweep(file) }
        }
        return counts
    }

    /// What killed parties left: items beside their placeholder or data, and temporary files.
    private func tidy(_ scanned: Scan) {
        for item in scanned.unsettled { settle(item) }
        for leftover in scanned.leftovers { removeLeftover(leftover) }
        for (path, error) in scanned.refusals { refuse(path, error) }
    }

    // MARK: Actions

    private func upload(_ file: FileCoordinator.Location) {
        do {
            try coordinator.coordinate(reading: file) { item in
                guard let fd = item.descriptor else { return }
                let contents = try FileVersion.readAll(descriptor: fd.rawValue, path: file.path, limit: Self.largest)
                var status = stat()
                fstat(fd.rawValue, &status)
                uploadedBytes -= uploaded[file.path]?.contents?.count ?? 0
                let kept = uploadedBytes + contents.count <= Self.uploadBudget
                if kept { uploadedBytes += contents.count }
                uploaded[file.path] = (kept ? contents : nil, status.st_mtim)
                counts.uploads += 1
            }
        } catch let error as CoordinationError {
            refuse(file.path, error)
        } catch { counts.skipped += 1 }
    }

    private func changedSinceUpload(_ file: FileCoordinator.Location) -> Bool {
        var status = stat()
        guard fstatat(file.folder.rawValue, file.name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { return false }
        guard let known = uploaded[file.path] else { return true }
        return (known.modified.tv_sec, known.modified.tv_nsec) != (status.st_mtim.tv_sec, status.st_mtim.tv_nsec)
    }

    /// A remote edit: the whole file rewritten with one more line.
    private func edit(_ file: FileCoordinator.Location) {
        editNumber += 1
        let line = Array("remote edit \(editNumber)\n".utf8)
        if options.naive {
            // Read, wait for "the network", write back over whatever happened meanwhile.
            guard let old = try? readUnlocked(file) else { counts.skipped += 1; return }
            var pause = timespec(tv_sec: 0, tv_nsec: Int(FileCoordinator.seconds(options.naiveLatency) * 1e9))
            nanosleep(&pause, nil)
            let temporary = ItemNames.temporary(of: file.name)
            let fd = openat(file.folder.rawValue, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
            guard fd >= 0 else { counts.skipped += 1; return }
            let contents = Self.ended(old) + line
            _ = contents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
            if renameat(file.folder.rawValue, temporary, file.folder.rawValue, file.name) != 0 {
                _ = unlinkat(file.folder.rawValue, temporary, 0)
                counts.skipped += 1
                return
            }
            counts.edits += 1
            return
        }
        do {
            // create: false — a file evicted since the scan is not the daemon's to re-create.
            try coordinator.coordinate(writing: file, options: .forReplacing, create: false) { item in
                let old = try Self.readAll(item.original!, path: file.path)
                try FileCoordinator.writeAll(Self.ended(old) + line, to: item.descriptor!.rawValue, path: file.path)
            }
            counts.edits += 1
        } catch let error as CoordinationError {
            refuse(file.path, error)
        } catch { counts.skipped += 1 }
    }

    /// A change made elsewhere from the last uploaded contents while this
    /// side changed too: last writer wins, by modification time; the loser
    /// is kept as a conflict version.
    private func conflict(_ file: FileCoordinator.Location) {
        guard let base = uploaded[file.path], let baseContents = base.contents else { return }
        do {
            try coordinator.coordinate(writing: file, options: .forReplacing, create: false) { item in
                FileVersion.removeLeftovers(of: file)
                let local = try Self.readAll(item.original!, path: file.path)
                var status = stat()
                guard fstat(item.original!.rawValue, &status) == 0 else {
                    throw CoordinationError.system(operation: "fstat", path: file.path, errno: Errno(rawValue: errno))
                }
                editNumber += 1
                let remote = Self.ended(baseContents) + Array("remote change \(editNumber)\n".utf8)
                // The remote side saved at a random instant since the upload.
                var now = timespec()
                clock_gettime(CLOCK_REALTIME, &now)
                let span = max(1, (now.tv_sec - base.modified.tv_sec) * 1_000_000_000 + (now.tv_nsec - base.modified.tv_nsec))
                let offset = Int(random.next() % UInt64(span))
                let remoteTime = timespec(tv_sec: base.modified.tv_sec + (base.modified.tv_nsec + offset) / 1_000_000_000,
                                          tv_nsec: (base.modified.tv_nsec + offset) % 1_000_000_000)
                let remoteWins = (remoteTime.tv_sec, remoteTime.tv_nsec) > (status.st_mtim.tv_sec, status.st_mtim.tv_nsec)
                let acl = AccessControl.read(AccessControl.access, of: item.original!.rawValue)
                // The version is durable before the file that loses it is replaced.
                if remoteWins {
                    try FileVersion.add(to: file, contents: local, modified: status.st_mtim, savingComputer: "this-computer", like: status, acl: acl)
                    try FileCoordinator.writeAll(remote, to: item.descriptor!.rawValue, path: file.path)
                } else {
                    try FileVersion.add(to: file, contents: remote, modified: remoteTime, savingComputer: "remote", like: status, acl: acl)
                    try FileCoordinator.writeAll(local, to: item.descriptor!.rawValue, path: file.path)
                }
            }
            counts.conflicts += 1
        } catch let error as CoordinationError {
            refuse(file.path, error)
        } catch { counts.skipped += 1 }
    }

    /// The file leaves; its stub and the server's copy stay. Under the
    /// folder lock and the file's write lock (neither waited for: a busy file
    /// is evicted later), and only while nothing of an earlier eviction is
    /// there. The stub is durable before the file is renamed to the
    /// server's copy (`.icloud.data`): the same inode, so nothing is copied
    /// and its owner and mode stay; a crash in between leaves the file beside
    /// a stub, which the next run settles by removing the stub.
    private func evict(_ file: FileCoordinator.Location) {
        do {
            guard let held = try FolderLock(file.folder, path: file.path, deadline: .now + Self.folderWait) else { counts.skipped += 1; return }
            defer { withExtendedLifetime(held) {} }
            guard let item = try coordinator.tryLock(file) else { counts.skipped += 1; return }
            let stub = file.sibling(.placeholder), data = file.sibling(.data)
            guard !Self.exists(stub), !Self.exists(data) else { counts.skipped += 1; return }  // unsettled: `settle` first
            try Placeholder.refuseIfOtherVersion(file)
            try Journal.recover(for: file, item: item)
            try Durably.sync(item.rawValue, path: file.path)
            let status = try item.status()
            // Its copy must have one link to be believed when it comes back: a file with other names stays.
            guard status.st_nlink == 1 else { counts.skipped += 1; return }
            let temporary = file.named(ItemNames.temporary(of: file.name))
            let fd = csb_open_regular(file.folder.rawValue, temporary.name, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            guard fd >= 0 else { throw CoordinationError.system(operation: "evicting", path: file.path, errno: Errno(rawValue: errno)) }
            let written = OwnedDescriptor(taking: fd)
            do {
                let contents = Placeholder.encode(.init(name: FileCoordinator.display(file.name), size: Int(status.st_size), owner: status.st_uid))
                try FileCoordinator.writeAll(contents, to: written.rawValue, path: stub.path)
                try Durably.match(written.rawValue, to: status, acl: AccessControl.read(AccessControl.access, of: item.rawValue), path: stub.path)
                try Durably.sync(written.rawValue, path: stub.path)
                guard try Durably.renameNoReplace(file.folder, temporary.name, file.folder, stub.name, path: stub.path) else {
                    throw CoordinationError.system(operation: "evicting", path: stub.path, errno: .fileExists)
                }
            } catch {
                _ = unlinkat(file.folder.rawValue, temporary.name, 0)
                throw error
            }
            try Durably.syncFolder(file.folder, path: file.path)
            guard try Durably.renameNoReplace(file.folder, file.name, file.folder, data.name, path: data.path) else {
                _ = unlinkat(file.folder.rawValue, stub.name, 0)
                throw CoordinationError.system(operation: "evicting", path: data.path, errno: .fileExists)
            }
            try Durably.syncFolder(file.folder, path: file.path)
            counts.evictions += 1
            evictedAt[file.path] = .now
        } catch let error as CoordinationError {
            refuse(file.path, error)
        } catch { counts.skipped += 1 }
    }

    /// Brings an evicted file back (on request, at random, or at a clean
    /// stop), and settles what a killed party or a writer outside the
    /// protocol left: all under the folder lock, so no writer creates the
    /// file between the look and the act.
    /// - only the stub and the server's copy: the copy is renamed back (it
    ///   is the file's own inode), locked until the stub is gone;
    /// - the file beside the server's copy (someone wrote it while it was
    ///   evicted): two versions of one file, so the copy becomes a conflict
    ///   version, never overwritten, never overwriting;
    /// - the file beside a stub with no copy: an eviction or materialisation
    ///   cut short; the stub goes;
    /// - a stub with no copy and no file, another version's stub, a link or
    ///   a folder where a stub or copy should be: left alone and reported.
    private func settle(_ file: FileCoordinator.Location) {
        let stub = file.sibling(.placeholder), data = file.sibling(.data), request = file.sibling(.download)
        do {
            guard let held = try FolderLock(file.folder, path: file.path, deadline: .now + Self.folderWait) else { counts.skipped += 1; return }
            defer { withExtendedLifetime(held) {} }
            let named = Self.status(file), stubbed = Self.status(stub), copied = Self.status(data)
            let present = named != nil, hasStub = stubbed != nil, hasData = copied != nil
            var read: Placeholder.Stub?
            if let stubbed {
                guard stubbed.isRegularFile else { throw CoordinationError.notARegularFile(stub.path) }
                read = try Placeholder.read(for: file)
            }
            if let copied, !copied.isRegularFile { throw CoordinationError.notARegularFile(data.path) }
            try Self.checkWriters(file, named: named, stub: stubbed.map { ($0, read?.owner) }, copy: copied)
            switch (present, hasStub, hasData) {
            case (false, _, true):
                let fd = csb_open_regular(file.folder.rawValue, data.name, O_RDWR, 0)
                guard fd >= 0 else { throw FileCoordinator.openingError(Errno(rawValue: errno), path: data.path) }
                let copy = OwnedDescriptor(taking: fd)
                guard let opened = try? copy.status(), let examined = copied, opened.inodeIdentity == examined.inodeIdentity else {
                    counts.skipped += 1  // swapped since the look: settled next time
                    return
                }
                // Locked before it has the name: a writer that opens it waits until the stub is gone.
                guard csb_ofd_lock(copy.rawValue, CSB_F_WRLCK, 0) == 0 else { counts.skipped += 1; return }
                guard try Durably.renameNoReplace(file.folder, data.name, file.folder, file.name, path: file.path) else {
                    counts.skipped += 1  // a file appeared meanwhile, outside the protocol: settled next time
                    return
                }
                guard FileCoordinator.holdsName(copy, file) else { throw CoordinationError.interfered(file.path) }
                try Durably.syncFolder(file.folder, path: file.path)
                _ = unlinkat(file.folder.rawValue, stub.name, 0)
                removeRequest(request)
                counts.materialisations += 1
            case (true, _, true):
                guard let item = try coordinator.tryLock(file) else { counts.skipped += 1; return }
                try FileVersion.adopt(data.name, besides: file, savingComputer: "remote")
                _ = unlinkat(file.folder.rawValue, stub.name, 0)
                removeRequest(request)
                withExtendedLifetime(item) {}
                counts.conflicts += 1
            case (true, true, false):
                _ = unlinkat(file.folder.rawValue, stub.name, 0)
                removeRequest(request)
            case (false, true, false):
                removeRequest(request)
                throw CoordinationError.damagedPlaceholder(stub.path)
            case (_, false, false):
                removeRequest(request)  // asked for a file that is not evicted
            }
        } catch let error as CoordinationError {
            refuse(file.path, error)
        } catch { counts.skipped += 1 }
    }

    /// Who may have written what `settle` acts on (PROTOCOL.md, "Who may have written
    /// what"). The stub is the item's owner's or this daemon's. The copy, beside the
    /// item, is the item's owner's or this daemon's, and the item is the copy's owner's
    /// or this daemon's (otherwise another user's file at the item's name would take
    /// the evicted item into a versions folder they own); in place of the item, the
    /// copy is the owner's the stub records (else the stub's owner's or this
    /// daemon's); with neither the item nor a stub, it is as any file someone creates
    /// at the item's name, which they may: only one link is needed.
    private static func checkWriters(_ file: FileCoordinator.Location, named: stat?, stub: (stat, UInt32?)?, copy: stat?) throws {
        let (stubPath, copyPath) = (file.sibling(.placeholder).path, file.sibling(.data).path)
        if let (stubbed, _) = stub, let problem = Trust.problem(with: stubbed, item: named ?? copy) {
            throw CoordinationError.untrusted(stubPath, problem: problem)
        }
        guard let copy else { return }
        if let named {
            if let problem = Trust.problem(with: copy, item: named) { throw CoordinationError.untrusted(copyPath, problem: problem) }
            if named.st_uid != copy.st_uid && named.st_uid != geteuid() {
                throw CoordinationError.untrusted(file.path, problem: "is owned by uid \(named.st_uid), but the evicted copy beside it by uid \(copy.st_uid): "
                    + "another user's file at the item's name is not settled with it")
            }
        } else if let (stubbed, recorded) = stub {
            // The copy is the item itself (its mode is the item's): its owner is what tells.
            let owner = recorded ?? stubbed.st_uid
            if copy.st_uid != owner && copy.st_uid != geteuid() {
                throw CoordinationError.untrusted(copyPath, problem: "is owned by uid \(copy.st_uid), but the item its stub stands for is uid \(owner)'s: "
                    + "another user may have put it there")
            }
            if let problem = Trust.problem(with: copy, item: copy) { throw CoordinationError.untrusted(copyPath, problem: problem) }
        } else if let problem = Trust.problem(with: copy, item: copy) {
            throw CoordinationError.untrusted(copyPath, problem: problem)
        }
    }

    /// A download request is an empty file anyone may make: what else is at its name is left alone.
    private func removeRequest(_ request: FileCoordinator.Location) {
        guard let status = Self.status(request), status.isRegularFile, status.st_size == 0 else { return }
        _ = unlinkat(request.folder.rawValue, request.name, 0)
    }

    /// A temporary file of a party that died: removed only while no party can
    /// be using it (the item's write lock, which every writer of one holds,
    /// or the folder lock while the item is missing).
    private func removeLeftover(_ leftover: Leftover) {
        let temporary = leftover.temporary
        do {
            let present = leftover.items.filter { Self.exists($0) }
            var locks: [OwnedDescriptor] = []
            var held: FolderLock?
            if present.isEmpty {
                guard let folderLock = try FolderLock(temporary.folder, path: temporary.path, deadline: .now + Self.folderWait) else { return }
                held = folderLock
                if leftover.items.contains(where: { Self.exists($0) }) { return }
            } else {
                // Every item whose temporary it may be (a hashed stem may be two items'), locked.
                for item in present {
                    guard let locked = try coordinator.tryLock(item) else { return }
                    locks.append(locked)
                }
            }
            defer { withExtendedLifetime((locks, held)) {} }
            // Only a file its item's owner (or this daemon) made is removed: another user's stays, reported.
            let owner = present.first.flatMap(Self.status) ?? leftover.items.lazy.compactMap(Trust.itemStatus).first
            if let status = Self.status(temporary), let problem = Trust.problem(with: status, item: owner) {
                throw CoordinationError.untrusted(temporary.path, problem: problem)
            }
            if unlinkat(temporary.folder.rawValue, temporary.name, 0) == 0 { counts.leftovers += 1 }
        } catch let error as CoordinationError {
            refuse(temporary.path, error)
        } catch { counts.skipped += 1 }
    }

    /// While holding the item's write lock (waiting for it, as a writer would):
    /// temporaries in its versions folder removed, and its journal recovered as
    /// any writer would before writing (a staged journal removed, a torn record
    /// rolled back). Every party keeping a version or writing a journal holds that
    /// lock, so none of them is in use. The item is changed only by a rollback.
    private func sweep(_ file: FileCoordinator.Location) {
        do {
            guard let locked = try coordinator.lock(file, flags: O_RDWR, create: false, type: CSB_F_WRLCK) else { return }
            defer { withExtendedLifetime(locked) {} }
            FileVersion.removeLeftovers(of: file)
            try Journal.recover(for: file, item: locked)
        } catch let error as CoordinationError {
            refuse(file.path, error)
        } catch { counts.skipped += 1 }
    }

    private func refuse(_ path: FilePath, _ error: CoordinationError) {
        switch error {
        case .otherProtocolVersion, .damagedPlaceholder, .notARegularFile, .link, .damagedJournal, .interfered, .untrusted, .unclaimedCopy:
            let message = error.description
            if reported.insert(message).inserted {
                counts.refused += 1
                options.report?(message)
            }
        default:
            counts.skipped += 1
        }
    }

    // MARK: Reading and walking

    private static func exists(_ location: FileCoordinator.Location) -> Bool {
        var status = stat()
        return fstatat(location.folder.rawValue, location.name, &status, AT_SYMLINK_NOFOLLOW) == 0
    }

    private static func status(_ location: FileCoordinator.Location) -> stat? {
        var status = stat()
        return fstatat(location.folder.rawValue, location.name, &status, AT_SYMLINK_NOFOLLOW) == 0 ? status : nil
    }

    private static func readAll(_ descriptor: FileDescriptor, path: FilePath) throws -> [UInt8] {
        try FileVersion.readAll(descriptor: descriptor.rawValue, path: path, limit: largest)
    }

    private func readUnlocked(_ file: FileCoordinator.Location) throws -> [UInt8] {
        let fd = csb_open_regular(file.folder.rawValue, file.name, O_RDONLY, 0)
        guard fd >= 0 else { throw CoordinationError.notARegularFile(file.path) }
        return try FileVersion.readAll(OwnedDescriptor(taking: fd), path: file.path, limit: Self.largest)
    }

    /// Files gone from the folder (renamed, deleted) leave the upload memory.
    private func forgetUploads(except files: [FileCoordinator.Location]) {
        let present = Set(files.map(\.path))
        for path in uploaded.keys where !present.contains(path) {
            uploadedBytes -= uploaded.removeValue(forKey: path)?.contents?.count ?? 0
        }
    }

    /// Text ends with a newline before a line is added to it.
    static func ended(_ bytes: [UInt8]) -> [UInt8] {
        bytes.isEmpty || bytes.last == UInt8(ascii: "\n") ? bytes : bytes + [UInt8(ascii: "\n")]
    }

    struct Leftover {
        /// The items whose temporary it may be: the item of its stem, or for a
        /// hashed stem every item there with that stem and the one its stub names
        /// (none when nothing says).
        var items: [FileCoordinator.Location]
        var temporary: FileCoordinator.Location
    }

    struct Scan {
        var files: [FileCoordinator.Location] = []
        /// Evicted files, by the name they will have again.
        var evicted: [FileCoordinator.Location] = []
        /// Files beside their stub or server copy: to settle.
        var unsettled: [FileCoordinator.Location] = []
        var requests: [FileCoordinator.Location] = []
        var leftovers: [Leftover] = []
        /// What is left alone for a person to look at.
        var refusals: [(FilePath, CoordinationError)] = []
    }

    private func scan(_ rootFolder: OwnedDescriptor) -> Scan {
        var result = Scan()
        var seen = 0
        var folders = 1
        var queue: [(OwnedDescriptor, FilePath, Int)] = []
        if let opened = Self.openFolder(rootFolder, Array(".".utf8CString)) { queue.append((opened, root, 0)) }
        while let (folder, path, depth) = queue.popLast() {
            guard let stream = try? directoryStream(taking: folder.duplicate()) else { continue }
            var items: [[UInt8]] = []
            var siblings: [ItemNames.Sibling: [[UInt8]]] = [:]
            var temporaries: [([UInt8], [UInt8])] = []
            while let entry = readdir(stream), seen < Self.maxEntries {
                seen += 1
                let bytes = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.bindMemory(to: UInt8.self).prefix { $0 != 0 }) }
                if bytes == [0x2e] || bytes == [0x2e, 0x2e] || bytes == Array(FileVersion.folderName.utf8) { continue }
                switch Int32(entry.pointee.d_type) {
                case Int32(DT_DIR):
                    if depth + 1 < Self.maxDepth, folders < Self.maxFolders, let child = Self.openFolder(folder, ItemNames.terminated(bytes)) {
                        folders += 1
                        queue.append((child, path.pushing(FilePath(bytes: bytes)), depth + 1))
                    }
                case Int32(DT_REG):
                    if bytes.first != 0x2e {
                        items.append(bytes)
                    } else if let stem = ItemNames.temporaryStem(bytes) {
                        temporaries.append((stem, bytes))
                    } else if let kind = [ItemNames.Sibling.download, .data, .placeholder].first(where: { ItemNames.stem(of: bytes, kind: $0) != nil }) {
                        siblings[kind, default: []].append(ItemNames.stem(of: bytes, kind: kind)!)
                    }
                default:
                    continue  // links, FIFOs, devices, sockets: never touched
                }
            }
            closedir(stream)
            // Which item each stem's siblings belong to. A readable stem `.NAME` is NAME's
            // alone. A stem of the hashed form `.sr2-<32 hex>` is that of every long name
            // with that hash and also the readable stem of the short name `sr2-<32 hex>`:
            // only its stub's own name (checked to have this stem) says whose its
            // placeholder and copy are, before any item present.
            var present: [[UInt8]: [[UInt8]]] = [:]
            for item in items { present[ItemNames.stem(of: item), default: []].append(item) }
            let location = { (item: [UInt8]) in Self.location(folder, item, path) }
            let sibling = { (stem: [UInt8], kind: ItemNames.Sibling) in
                Self.location(folder, stem + Array(kind.rawValue.utf8), path.pushing(FilePath(bytes: stem + Array(kind.rawValue.utf8))))
            }
            var stubNames: [[UInt8]: [UInt8]?] = [:]
            func stubName(_ stem: [UInt8]) -> [UInt8]? {
                if let known = stubNames[stem] { return known }
                var named: [UInt8]?
                if siblings[.placeholder]?.contains(stem) == true {
                    let stub = sibling(stem, .placeholder)
                    let fd = csb_open_regular(folder.rawValue, stub.name, O_RDONLY, 0)
                    if fd >= 0, let bytes = try? FileVersion.readAll(OwnedDescriptor(taking: fd), path: stub.path, limit: Placeholder.largestStub),
                       let decoded = try? Placeholder.decode(bytes, path: stub.path), ItemNames.stem(of: decoded.name.bytes) == stem {
                        named = decoded.name.bytes
                    }
                }
                stubNames[stem] = named
                return named
            }
            func owners(of stem: [UInt8]) -> [[UInt8]] {
                if ItemNames.isHashed(stem) { return stubName(stem).map { [$0] } ?? present[stem] ?? [] }
                return present[stem] ?? ItemNames.readableItem(of: stem).map { [$0] } ?? []
            }
            var placed: Set<[UInt8]> = []
            for stem in (siblings[.placeholder] ?? []) + (siblings[.data] ?? []) {
                let candidates = owners(of: stem)
                if ItemNames.isHashed(stem), stubName(stem) == nil {
                    if siblings[.placeholder]?.contains(stem) != true {
                        // A copy with no stub: which of the items this stem may be it is a copy of, nothing says.
                        let copy = sibling(stem, .data)
                        result.refusals.append((copy.path, .unclaimedCopy(copy.path)))
                        continue
                    }
                    if candidates.isEmpty {
                        let stub = sibling(stem, .placeholder)
                        result.refusals.append((stub.path, .damagedPlaceholder(stub.path)))
                        continue
                    }
                }
                for name in candidates where placed.insert(name).inserted {
                    if present[ItemNames.stem(of: name)]?.contains(name) == true { result.unsettled.append(location(name)) } else { result.evicted.append(location(name)) }
                }
            }
            for stem in siblings[.download] ?? [] {
                for name in owners(of: stem) { result.requests.append(location(name)) }
            }
            for (stem, bytes) in temporaries {
                let temporary = FileCoordinator.Location(folder: folder, name: ItemNames.terminated(bytes), path: path.pushing(FilePath(bytes: bytes)))
                var candidates = owners(of: stem)
                for item in present[stem] ?? [] where !candidates.contains(item) { candidates.append(item) }
                result.leftovers.append(Leftover(items: candidates.map(location), temporary: temporary))
            }
            result.files += items.map(location)
        }
        result.files.sort { $0.path.string < $1.path.string }  // reproducible picks
        result.evicted.sort { $0.path.string < $1.path.string }
        return result
    }

    private static func location(_ folder: OwnedDescriptor, _ bytes: [UInt8], _ path: FilePath) -> FileCoordinator.Location {
        FileCoordinator.Location(folder: folder, name: ItemNames.terminated(bytes), path: path.pushing(FilePath(bytes: bytes)))
    }

    /// A folder the scan found, read through its parent, never through a link.
    private static func openFolder(_ parent: OwnedDescriptor, _ name: [CChar]) -> OwnedDescriptor? {
        try? .openFolder(name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, relativeTo: parent, follow: false, use: .read)
    }

    private func happens(_ probability: Double) -> Bool {
        probability > 0 && Double(random.next() >> 11) / Double(1 << 53) < probability
    }

    private func pick<T>(_ list: [T]) -> T? {
        list.isEmpty ? nil : list[Int(random.next() % UInt64(list.count))]
    }
}

/// A small seeded generator: the same seed, the same run (given the same folder).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

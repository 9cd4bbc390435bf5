@preconcurrency import Glibc
import CSandbox
import Sandbox
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
        public init() {}
    }

    public struct Counts: Sendable, Equatable {
        public var uploads = 0, edits = 0, evictions = 0, materialisations = 0, conflicts = 0, skipped = 0
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

    static let largest = 16 << 20
    static let maxEntries = 10_000
    static let maxDepth = 8
    /// Every file found keeps its folder open until the next scan: a vault
    /// of thousands of folders must not use up the process's descriptors.
    static let maxFolders = 256

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
        while !shouldStop() {
            if ContinuousClock.now - lastScan > .milliseconds(100) {
                scanned = scan(rootFolder)
                lastScan = ContinuousClock.now
                forgetUploads(except: scanned.files)
            }
            for request in scanned.requests { materialise(request) }
            scanned.requests = []
            for file in scanned.files where changedSinceUpload(file) { upload(file) }
            if happens(options.editRate * seconds), let file = pick(scanned.files) { edit(file) }
            if happens(options.conflictRate * seconds), let file = pick(scanned.files) { conflict(file) }
            if happens(options.evictRate * seconds), let file = pick(scanned.files) {
                evict(file)
                scanned.files.removeAll { $0.path == file.path }
            }
            // A file this run evicted stays a placeholder for a second at least, as a real one would.
            let downloadable = scanned.stubs.filter { evictedAt[$0.path].map { ContinuousClock.now - $0 > .seconds(1) } ?? true }
            if happens(options.evictRate * seconds), let stub = pick(downloadable) {
                materialise(stub)
                scanned.stubs.removeAll { $0.path == stub.path }
            }
            usleep(useconds_t(seconds * 1_000_000))
        }
        // A clean stop: every placeholder ours becomes a file again.
        if options.restoreOnStop {
            for stub in scan(rootFolder).stubs { materialise(stub) }
        }
        return counts
    }

    // MARK: Actions

    private func upload(_ file: FileCoordinator.Location) {
        do {
            try coordinator.coordinate(reading: file) { item in
                guard let fd = item.descriptor else { return }
                let contents = try FileVersion.readAll(OwnedDescriptor(taking: dup(fd.rawValue)), path: file.path, limit: Self.largest)
                var status = stat()
                fstat(fd.rawValue, &status)
                uploadedBytes -= uploaded[file.path]?.contents?.count ?? 0
                let kept = uploadedBytes + contents.count <= Self.uploadBudget
                if kept { uploadedBytes += contents.count }
                uploaded[file.path] = (kept ? contents : nil, status.st_mtim)
                counts.uploads += 1
            }
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
            let temporary = FileCoordinator.temporaryName(for: file.name)
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
            try coordinator.coordinate(writing: file, options: .forReplacing) { item in
                let old = try readLocked(file)
                try FileCoordinator.writeAll(Self.ended(old) + line, to: item.descriptor!.rawValue, path: file.path)
            }
            counts.edits += 1
        } catch { counts.skipped += 1 }
    }

    /// A change made elsewhere from the last uploaded contents while this
    /// side changed too: last writer wins, by modification time; the loser
    /// is kept as a conflict version.
    private func conflict(_ file: FileCoordinator.Location) {
        guard let base = uploaded[file.path], let baseContents = base.contents else { return }
        do {
            try coordinator.coordinate(writing: file, options: .forReplacing) { item in
                let local = try readLocked(file)
                var status = stat()
                guard fstatat(file.folder.rawValue, file.name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { return }
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
                if remoteWins {
                    try FileVersion.add(to: file, contents: local, modified: status.st_mtim, savingComputer: "this-computer")
                    try FileCoordinator.writeAll(remote, to: item.descriptor!.rawValue, path: file.path)
                } else {
                    try FileVersion.add(to: file, contents: remote, modified: remoteTime, savingComputer: "remote")
                    try FileCoordinator.writeAll(local, to: item.descriptor!.rawValue, path: file.path)
                }
            }
            counts.conflicts += 1
        } catch { counts.skipped += 1 }
    }

    /// The file leaves; its stub and the server's copy stay.
    private func evict(_ file: FileCoordinator.Location) {
        do {
            try coordinator.coordinate(writing: file, options: .forDeleting) { _ in
                let contents = try readLocked(file)
                try Self.create(file.sibling(".icloud.data"), contents)
                try Self.create(file.sibling(".icloud"), Placeholder.encode(.init(name: FileCoordinator.display(file.name), size: contents.count)))
                guard unlinkat(file.folder.rawValue, file.name, 0) == 0 else {
                    throw CoordinationError.system(operation: "evicting", path: file.path, errno: Errno(rawValue: errno))
                }
            }
            counts.evictions += 1
            evictedAt[file.path] = .now
        } catch { counts.skipped += 1 }
    }

    /// `stub` is the evicted file's location (NAME, not .NAME.icloud).
    private func materialise(_ file: FileCoordinator.Location) {
        let data = file.sibling(".icloud.data")
        var probe = stat()
        guard fstatat(data.folder.rawValue, data.name, &probe, AT_SYMLINK_NOFOLLOW) == 0 else {
            // A request for a file that is not evicted (or not by us): nothing to bring back.
            _ = unlinkat(file.folder.rawValue, FileCoordinator.sibling(of: file.name, suffix: ".icloud.download"), 0)
            return
        }
        do {
            let fd = csb_open_regular(data.folder.rawValue, data.name, O_RDONLY, 0)
            guard fd >= 0 else { throw CoordinationError.notARegularFile(data.path) }
            let contents = try FileVersion.readAll(OwnedDescriptor(taking: fd), path: data.path, limit: Self.largest)
            var status = stat()
            if fstatat(file.folder.rawValue, file.name, &status, AT_SYMLINK_NOFOLLOW) == 0 {
                // Written meanwhile despite the placeholder: keep the server's copy as a conflict version.
                try FileVersion.add(to: file, contents: contents, modified: status.st_mtim, savingComputer: "remote")
                counts.conflicts += 1
            } else {
                try coordinator.replace(contentsOf: file, with: contents, materialising: true)
            }
            for suffix in [".icloud.download", ".icloud", ".icloud.data"] {
                _ = unlinkat(file.folder.rawValue, FileCoordinator.sibling(of: file.name, suffix: suffix), 0)
            }
            counts.materialisations += 1
        } catch { counts.skipped += 1 }
    }

    // MARK: Reading and walking

    private func readLocked(_ file: FileCoordinator.Location) throws -> [UInt8] {
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

    private func readUnlocked(_ file: FileCoordinator.Location) throws -> [UInt8] { try readLocked(file) }

    private static func create(_ location: FileCoordinator.Location, _ contents: [UInt8]) throws {
        let fd = csb_open_regular(location.folder.rawValue, location.name, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw CoordinationError.system(operation: "writing", path: location.path, errno: Errno(rawValue: errno)) }
        let file = OwnedDescriptor(taking: fd)
        try FileCoordinator.writeAll(contents, to: file.rawValue, path: location.path)
    }

    /// Text ends with a newline before a line is added to it.
    static func ended(_ bytes: [UInt8]) -> [UInt8] {
        bytes.isEmpty || bytes.last == UInt8(ascii: "\n") ? bytes : bytes + [UInt8(ascii: "\n")]
    }

    struct Scan {
        var files: [FileCoordinator.Location] = []
        /// Evicted files, by the name they will have again.
        var stubs: [FileCoordinator.Location] = []
        var requests: [FileCoordinator.Location] = []
    }

    private func scan(_ rootFolder: OwnedDescriptor) -> Scan {
        var result = Scan()
        var seen = 0
        var folders = 1
        var queue: [(OwnedDescriptor, FilePath, Int)] = []
        if let opened = Self.openFolder(rootFolder, ".") { queue.append((opened, root, 0)) }
        while let (folder, path, depth) = queue.popLast() {
            guard let stream = fdopendir(dup(folder.rawValue)) else { continue }
            defer { closedir(stream) }
            while let entry = readdir(stream), seen < Self.maxEntries {
                seen += 1
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    Array(raw.bindMemory(to: CChar.self).prefix { $0 != 0 }) + [0]
                }
                let bytes = name.dropLast().map { UInt8(bitPattern: $0) }
                if bytes == [0x2e] || bytes == [0x2e, 0x2e] || bytes == Array(FileVersion.folderName.utf8) { continue }
                let childPath = path.pushing(FilePath(bytes: bytes))
                switch Int32(entry.pointee.d_type) {
                case Int32(DT_DIR):
                    if depth + 1 < Self.maxDepth, folders < Self.maxFolders, let child = Self.openFolder(folder, name) {
                        folders += 1
                        queue.append((child, childPath, depth + 1))
                    }
                case Int32(DT_REG):
                    if let evicted = Self.stripped(bytes, prefix: ".", suffix: ".icloud.download") {
                        result.requests.append(Self.location(folder, evicted, path))
                    } else if let evicted = Self.stripped(bytes, prefix: ".", suffix: ".icloud") {
                        result.stubs.append(Self.location(folder, evicted, path))
                    } else if bytes.first != 0x2e {
                        result.files.append(FileCoordinator.Location(folder: folder, name: name, path: childPath))
                    }
                default:
                    continue  // links, FIFOs, devices, sockets: never touched
                }
            }
        }
        result.files.sort { $0.path.string < $1.path.string }  // reproducible picks
        result.stubs.sort { $0.path.string < $1.path.string }
        return result
    }

    private static func stripped(_ bytes: [UInt8], prefix: String, suffix: String) -> [UInt8]? {
        let head = Array(prefix.utf8), tail = Array(suffix.utf8)
        guard bytes.count > head.count + tail.count, bytes.starts(with: head), Array(bytes.suffix(tail.count)) == tail else { return nil }
        return Array(bytes.dropFirst(head.count).dropLast(tail.count))
    }

    private static func location(_ folder: OwnedDescriptor, _ bytes: [UInt8], _ path: FilePath) -> FileCoordinator.Location {
        FileCoordinator.Location(folder: folder, name: bytes.map { CChar(bitPattern: $0) } + [0], path: path.pushing(FilePath(bytes: bytes)))
    }

    private static func openFolder(_ parent: OwnedDescriptor, _ name: [CChar]) -> OwnedDescriptor? {
        let fd = openat(parent.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        return fd < 0 ? nil : OwnedDescriptor(taking: fd)
    }

    private static func openFolder(_ parent: OwnedDescriptor, _ name: String) -> OwnedDescriptor? {
        openFolder(parent, Array(name.utf8CString))
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

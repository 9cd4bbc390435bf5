@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// Coordinates reads and writes of one file with every other process that
/// follows the same protocol (PROTOCOL.md beside this file), as
/// NSFileCoordinator does on Apple systems: a sync daemon outside the
/// sandbox and a writer inside it see each other through kernel locks on the
/// file itself, with no lock server and no file outside the file's folder.
///
/// Readers share the item; writers have it alone. A party that waited while
/// the item was replaced (renamed over) works on the new file, never on the
/// unlinked one. Every lock is an open file description lock: it goes away
/// when its holder dies, however it dies.
public struct FileCoordinator: Sendable {
    /// How long to wait for another party; nil waits for ever.
    public var timeout: Duration?

    public init(timeout: Duration? = .seconds(30)) {
        self.timeout = timeout
    }

    public struct ReadingOptions: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// Read what is on disk as it is (no journal recovery first).
        public static let withoutChanges = ReadingOptions(rawValue: 1)
    }

    /// The intents of NSFileCoordinator.WritingOptions.
    public enum WritingIntent: Sendable {
        /// Changing the file in place (appending): the block gets the file itself, opened for appending.
        case forMerging
        /// Writing it anew: the block writes a temporary file beside it, which replaces the item when the block returns.
        case forReplacing
        /// The block deletes the item.
        case forDeleting
        /// The block moves the item.
        case forMoving
    }

    /// What a coordinated block works on: valid only inside the block.
    public struct Item {
        /// Where to read or write: the item, or for `.forReplacing` the temporary file that will
        /// replace it. It goes through a descriptor the coordinator holds (`/proc/self/fd/N`, or
        /// `/proc/self/fd/FOLDER/NAME` for deleting, moving and a missing item), never through
        /// the names in the caller's path: another process that can write the folder (an app in
        /// its grant) may swap a name for a link while the block runs, and must not redirect it.
        /// Only where /proc is not mounted is it the path as given.
        public let path: FilePath
        /// Open on `path` (nil for deleting and moving, or for reading an item that does not exist).
        public let descriptor: FileDescriptor?
        /// For `.forReplacing`: the current file, locked and open for reading
        /// (read the old contents here, never by the name).
        public let original: FileDescriptor?
        /// The descriptor `path` goes through, and the name below it, if any.
        public let anchor: CInt
        let leaf: [CChar]?

        init(anchor: CInt, leaf: [CChar]? = nil, descriptor: CInt?, original: CInt? = nil, given: FilePath) {
            self.anchor = anchor
            self.leaf = leaf
            self.descriptor = descriptor.map { FileDescriptor(rawValue: $0) }
            self.original = original.map { FileDescriptor(rawValue: $0) }
            path = Self.path(through: anchor, leaf: leaf) ?? given
        }

        /// Whether `path` goes through /proc/self/fd (else it is the path as given).
        public var throughDescriptor: Bool { Self.procMounted }

        /// `path` as a process sees it that holds a copy of `anchor` at `fd`
        /// (a child that inherited it).
        public func path(through fd: CInt) -> FilePath {
            Self.path(through: fd, leaf: leaf) ?? path
        }

        private static let procMounted = access("/proc/self/fd", X_OK) == 0

        private static func path(through fd: CInt, leaf: [CChar]?) -> FilePath? {
            guard procMounted else { return nil }
            var bytes = Array("/proc/self/fd/\(fd)".utf8)
            if let leaf { bytes += [UInt8(ascii: "/")] + leaf.dropLast().map { UInt8(bitPattern: $0) } }
            return FilePath(bytes: bytes)
        }
    }

    /// A file named by its folder's descriptor and its name: how a daemon
    /// that walks a folder without following links names what it found.
    public struct Location {
        public let folder: OwnedDescriptor
        /// NUL-terminated bytes.
        public let name: [CChar]
        /// For messages and for the block: the path as the caller knows it.
        public let path: FilePath

        public init(folder: OwnedDescriptor, name: [CChar], path: FilePath) {
            self.folder = folder
            self.name = name
            self.path = path
        }

        /// `path`'s folder (following links: the caller chose the path) and last component.
        public init(_ path: FilePath) throws {
            self.init(folder: try FileCoordinator.folder(of: path), name: try FileCoordinator.name(of: path), path: path)
        }

        /// A sibling of this file (PROTOCOL.md, "Names").
        func sibling(_ kind: ItemNames.Sibling) -> Location {
            named(ItemNames.sibling(kind, of: name))
        }

        /// Another entry of this file's folder.
        func named(_ other: [CChar]) -> Location {
            // By bytes: FilePath's component view costs a walk of the whole
            // path each time, and every coordinated write names siblings.
            var bytes = path.bytes
            if let slash = bytes.lastIndex(of: UInt8(ascii: "/")) {
                bytes.removeSubrange((slash + 1)...)
            } else {
                bytes = []
            }
            return Location(folder: folder, name: other, path: FilePath(bytes: bytes + other.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }))
        }
    }

    // MARK: Reading

    /// Runs `body` while no coordinated writer changes the item. `body` gets
    /// a descriptor open for reading, or nil when the item does not exist.
    public func coordinate<T>(readingItemAt path: FilePath, options: ReadingOptions = [], _ body: (Item) throws -> T) throws -> T {
        try coordinate(reading: Location(path), options: options, body)
    }

    public func coordinate<T>(reading location: Location, options: ReadingOptions = [], _ body: (Item) throws -> T) throws -> T {
        let (folder, name, path) = (location.folder, location.name, location.path)
        if !options.contains(.withoutChanges), Journal.exists(for: location) {
            // A writer died mid-record: roll it back first, if we may write.
            if let writable = try? lock(location, flags: O_RDWR, create: false, type: CSB_F_WRLCK) {
                try Journal.recover(for: location, item: writable)
            }
        }
        guard let item = try lock(location, flags: O_RDONLY, create: false, type: CSB_F_RDLCK) else {
            return try body(Item(anchor: folder.rawValue, leaf: name, descriptor: nil, given: path))
        }
        return try body(Item(anchor: item.rawValue, descriptor: item.rawValue, given: path))
    }

    // MARK: Writing

    /// Runs `body` while no other coordinated party uses the item. When it
    /// returns, what it wrote is durable (the file and its folder flushed).
    public func coordinate<T>(writingItemAt path: FilePath, options intent: WritingIntent = .forMerging, _ body: (Item) throws -> T) throws -> T {
        try coordinate(writing: Location(path), options: intent, body)
    }

    public func coordinate<T>(writing location: Location, options intent: WritingIntent = .forMerging, _ body: (Item) throws -> T) throws -> T {
        try coordinate(writing: location, options: intent, create: true, body)
    }

    /// `create`: false for a party that must not bring a missing item into
    /// being (the sync daemon editing what it found): `.forMerging` and
    /// `.forReplacing` then throw ENOENT.
    func coordinate<T>(writing location: Location, options intent: WritingIntent, create: Bool, _ body: (Item) throws -> T) throws -> T {
        let (folder, name, path) = (location.folder, location.name, location.path)
        switch intent {
        case .forMerging:
            return try merging(location, create: create) { item in
                let result = try body(Item(anchor: item.rawValue, descriptor: item.rawValue, given: path))
                try Durably.sync(item.rawValue, path: path)  // under the lock: the block may have written anything
                return (result, flushedUnderLock: true)
            }
        case .forReplacing:
            // Held on the old inode until the new one is in place; waiters
            // then find the name moved on, and retry on the new file.
            guard let old = try lock(location, flags: O_RDWR, create: create, type: CSB_F_WRLCK) else {
                throw CoordinationError.system(operation: "opening", path: path, errno: .noSuchFileOrDirectory)
            }
            try Journal.recover(for: location, item: old)
            let original: stat
            do { original = try old.status() } catch { throw CoordinationError.system(operation: "fstat", path: path, errno: error) }
            let temporary = location.named(ItemNames.temporary(of: name))
            let fd = csb_open_regular(folder.rawValue, temporary.name, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            guard fd >= 0 else {
                throw CoordinationError.system(operation: "creating a temporary file beside", path: path, errno: Errno(rawValue: errno))
            }
            let written = OwnedDescriptor(taking: fd)
            do {
                let result = try body(Item(anchor: written.rawValue, descriptor: written.rawValue, original: old.rawValue, given: temporary.path))
                try Durably.match(written.rawValue, to: original, acl: AccessControl.read(AccessControl.access, of: old.rawValue), path: temporary.path)
                try Durably.sync(written.rawValue, path: temporary.path)
                do {
                    _ = try syscallRetrying { renameat(folder.rawValue, temporary.name, folder.rawValue, name) }
                } catch {
                    throw CoordinationError.system(operation: "replacing", path: path, errno: error)
                }
                // The rename moves whatever the temporary name holds by then: another
                // process may have swapped it. Say so rather than report success.
                var ours = stat()
                var placed = stat()
                guard fstat(written.rawValue, &ours) == 0, fstatat(folder.rawValue, name, &placed, AT_SYMLINK_NOFOLLOW) == 0,
                      ours.st_dev == placed.st_dev, ours.st_ino == placed.st_ino else {
                    throw CoordinationError.interfered(path)
                }
                try Durably.syncFolder(folder, path: path)
                withExtendedLifetime(old) {}
                return result
            } catch {
                _ = unlinkat(folder.rawValue, temporary.name, 0)
                throw error
            }
        case .forDeleting, .forMoving:
            // Held until the block has deleted or moved it: waiters then find the name gone.
            let item = try lock(location, flags: O_RDWR, create: false, type: CSB_F_WRLCK)
            if let item { try Journal.recover(for: location, item: item) } else { try Placeholder.refuseIfEvicted(location) }
            let result = try body(Item(anchor: folder.rawValue, leaf: name, descriptor: nil, given: path))
            try Durably.syncFolder(folder, path: path)
            withExtendedLifetime(item) {}
            return result
        }
    }

    /// Appends `record` and a newline as one whole line, with the merging
    /// intent. Returns only once the line is durably in the file (the file
    /// and its folder flushed); throws with nothing written otherwise. A
    /// last line without its newline (an editor's) is ended first, so the
    /// record never joins it.
    public func append(line record: [UInt8], to path: FilePath) throws {
        try append(line: record, to: Location(path))
    }

    public func append(line record: [UInt8], to location: Location) throws {
        let path = location.path
        guard !record.contains(UInt8(ascii: "\n")), !record.contains(0) else { throw CoordinationError.notOneLine }
        try merging(location, create: true) { item in
            let fd = item.rawValue
            var status = stat()
            guard fstat(fd, &status) == 0 else { throw CoordinationError.system(operation: "fstat", path: path, errno: Errno(rawValue: errno)) }
            let size = Int64(status.st_size)
            var last: UInt8 = UInt8(ascii: "\n")
            if size > 0 {
                let count = try syscallRetrying { pread(fd, &last, 1, off_t(size - 1)) }
                guard count == 1 else { throw CoordinationError.system(operation: "reading the end of", path: path, errno: .ioError) }
            }
            let data = (last == UInt8(ascii: "\n") ? [] : [UInt8(ascii: "\n")]) + record + [UInt8(ascii: "\n")]
            return ((), flushedUnderLock: try Journal.append(data, at: size, to: fd, for: location))
        }
    }

    /// The merging intent. `body` writes through the locked item and says
    /// whether it flushed it; if not, the flush comes after the lock is
    /// released, so that contending writers' flushes overlap (the kernel
    /// commits them together) rather than queue. That is safe for what
    /// `append` leaves unflushed, a record within one page: it is whole or
    /// absent, and every party that copies or moves the file while we flush
    /// (an edit, a conflict, an eviction) flushes its copy, or this very
    /// inode, before it reports or renames; either way the record is durable
    /// once our flush of this inode returns. The folder is flushed last: the
    /// item's creator may have died before it did.
    private func merging<T>(_ location: Location, create: Bool, _ body: (OwnedDescriptor) throws -> (T, flushedUnderLock: Bool)) throws -> T {
        guard let item = try lock(location, flags: O_RDWR | O_APPEND, create: create, type: CSB_F_WRLCK) else {
            throw CoordinationError.system(operation: "opening", path: location.path, errno: .noSuchFileOrDirectory)
        }
        try Journal.recover(for: location, item: item)
        let (result, flushed) = try body(item)
        _ = csb_ofd_lock(item.rawValue, CSB_F_UNLCK, 0)
        if !flushed { try Durably.sync(item.rawValue, path: location.path) }
        try Durably.syncFolder(location.folder, path: location.path)
        return result
    }

    /// Replaces the item's contents with `data` (temporary file, renamed
    /// over): a coordinated reader sees the old file or the new one, whole.
    public func replace(contentsOf path: FilePath, with data: [UInt8]) throws {
        try replace(contentsOf: Location(path), with: data)
    }

    public func replace(contentsOf location: Location, with data: [UInt8]) throws {
        try coordinate(writing: location, options: .forReplacing) { item in
            try Self.writeAll(data, to: item.descriptor!.rawValue, path: location.path)
        }
    }

    /// A file's new contents written ahead of its replacement: an unnamed
    /// file (O_TMPFILE) in the item's folder, so that no party sees a
    /// temporary whose item nobody holds. Many are written, the filesystem
    /// is flushed once, then each is put in place under its item's lock
    /// (`commit`): each file's bytes are on disk before its rename, as in
    /// `coordinate(writing:options: .forReplacing)`, without an fsync each.
    public final class PreparedReplacement {
        let location: Location
        let file: OwnedDescriptor
        init(location: Location, file: OwnedDescriptor) {
            self.location = location
            self.file = file
        }
    }

    /// Writes `source`'s contents (a regular file, copied from offset 0,
    /// holes kept) into a new unnamed file beside the item. Nil where the
    /// filesystem has no unnamed files: use `coordinate` for that item.
    public func prepareReplacement(of location: Location, copying source: CInt) throws -> PreparedReplacement? {
        // O_TMPFILE (hidden from Swift by Glibc): __O_TMPFILE | O_DIRECTORY.
        let fd = openat(location.folder.rawValue, ".", 0o20000000 | O_DIRECTORY | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if [EOPNOTSUPP, EISDIR, EINVAL].contains(errno) { return nil }
            throw CoordinationError.system(operation: "creating an unnamed file beside", path: location.path, errno: Errno(rawValue: errno))
        }
        let file = OwnedDescriptor(taking: fd)
        guard csb_copy_file_data(file.rawValue, source) == 0 else {
            throw CoordinationError.system(operation: "writing the new contents of", path: location.path, errno: Errno(rawValue: errno))
        }
        return PreparedReplacement(location: location, file: file)
    }

    /// Puts a prepared file in place of its item, under the item's write
    /// lock (an item that does not exist is created under the folder lock
    /// first, when `create`), if `check` accepts the item as it is then;
    /// false, with nothing changed, when it does not. The new file gets the
    /// item's owner, permissions and ACL. Nothing is flushed here: the
    /// prepared bytes must have been flushed before (`syncfs`), and the
    /// caller flushes the folders before it reports success.
    public func commit(_ prepared: PreparedReplacement, create: Bool, if check: (stat) -> Bool) throws -> Bool {
        let location = prepared.location
        let (folder, name, path) = (location.folder, location.name, location.path)
        guard let old = try lock(location, flags: O_RDWR, create: create, type: CSB_F_WRLCK) else {
            throw CoordinationError.system(operation: "opening", path: path, errno: .noSuchFileOrDirectory)
        }
        try Journal.recover(for: location, item: old)
        let original: stat
        do { original = try old.status() } catch { throw CoordinationError.system(operation: "fstat", path: path, errno: error) }
        guard check(original) else { return false }
        try Durably.match(prepared.file.rawValue, to: original, acl: AccessControl.read(AccessControl.access, of: old.rawValue), path: path)
        let temporary = location.named(ItemNames.temporary(of: name))
        guard linkat(AT_FDCWD, "/proc/self/fd/\(prepared.file.rawValue)", folder.rawValue, temporary.name, AT_SYMLINK_FOLLOW) == 0 else {
            throw CoordinationError.system(operation: "naming the new contents of", path: path, errno: Errno(rawValue: errno))
        }
        do {
            _ = try syscallRetrying { renameat(folder.rawValue, temporary.name, folder.rawValue, name) }
        } catch {
            _ = unlinkat(folder.rawValue, temporary.name, 0)
            throw CoordinationError.system(operation: "replacing", path: path, errno: error)
        }
        var ours = stat()
        var placed = stat()
        guard fstat(prepared.file.rawValue, &ours) == 0, fstatat(folder.rawValue, name, &placed, AT_SYMLINK_NOFOLLOW) == 0,
              ours.st_dev == placed.st_dev, ours.st_ino == placed.st_ino else {
            throw CoordinationError.interfered(path)
        }
        withExtendedLifetime(old) {}
        return true
    }

    /// Keeps `contents` as a conflict version of the item while holding its
    /// write lock: the item stays as it is (`versions list` shows the
    /// version). Nil, with nothing kept, when there is no item to keep a
    /// version of. For a party that must not overwrite what another wrote
    /// (a staged grant's accept, when the file changed since it was staged).
    public func keepConflictVersion(of location: Location, contents: [UInt8], modified: timespec, savingComputer: String) throws -> FileVersion? {
        guard let item = try lock(location, flags: O_RDWR, create: false, type: CSB_F_WRLCK) else { return nil }
        try Journal.recover(for: location, item: item)
        let original: stat
        do { original = try item.status() } catch { throw CoordinationError.system(operation: "fstat", path: location.path, errno: error) }
        return try FileVersion.add(
            to: location, contents: contents, modified: modified, savingComputer: savingComputer, like: original,
            acl: AccessControl.read(AccessControl.access, of: item.rawValue))
    }

    // MARK: The protocol's lock

    /// Opens the item (a regular file, no link), takes the lock, and checks
    /// that the name still leads to the locked inode; retries when it was
    /// replaced, moved or evicted meanwhile. nil when it does not exist and
    /// `create` is false. A missing item is created only under the folder
    /// lock, and only while neither it nor its placeholder exists: a writer
    /// that lost the race to an eviction finds the placeholder, never makes
    /// a second file beside it.
    func lock(_ location: Location, flags: CInt, create: Bool, type: Int16) throws -> OwnedDescriptor? {
        let (folder, name, path) = (location.folder, location.name, location.path)
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
            var fd = csb_open_regular(folder.rawValue, name, flags, 0)
            if fd < 0 {
                let error = Errno(rawValue: errno)
                switch error {
                case .noSuchFileOrDirectory:
                    if !create {
                        try Placeholder.refuseIfOtherVersion(location)
                        return nil
                    }
                    guard let made = try createItem(location, flags: flags, deadline: deadline) else { continue }
                    fd = made
                case .interrupted: continue
                default: throw Self.openingError(error, path: path)
                }
            }
            let item = OwnedDescriptor(taking: fd)
            try acquire(item, type: type, path: path, deadline: deadline)
            if Self.holdsName(item, location) { return item }
            // Replaced, moved, deleted or evicted while we waited: start again on what the name holds now.
            if let deadline, ContinuousClock.now >= deadline { throw CoordinationError.timedOut(path, seconds: Self.seconds(timeout)) }
        }
    }

    /// Creates the missing item under the folder lock: nil when another
    /// party made it first (the caller opens theirs).
    private func createItem(_ location: Location, flags: CInt, deadline: ContinuousClock.Instant?) throws -> CInt? {
        let (folder, name, path) = (location.folder, location.name, location.path)
        guard let held = try FolderLock(folder, path: path, deadline: deadline) else {
            throw CoordinationError.timedOut(path, seconds: Self.seconds(timeout))
        }
        defer { withExtendedLifetime(held) {} }
        var status = stat()
        if fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0 { return nil }
        try Placeholder.refuseIfEvicted(location)
        let fd = csb_open_regular(folder.rawValue, name, flags | O_CREAT | O_EXCL, 0o666)
        if fd < 0 {
            if errno == EEXIST || errno == EINTR { return nil }
            throw Self.openingError(Errno(rawValue: errno), path: path)
        }
        return fd
    }

    /// Locks the item without waiting: nil when it is missing, held by
    /// another party, or not what the name holds. For the sync daemon,
    /// which comes back later rather than queue behind writers.
    func tryLock(_ location: Location, flags: CInt = O_RDWR) throws -> OwnedDescriptor? {
        let fd = csb_open_regular(location.folder.rawValue, location.name, flags, 0)
        guard fd >= 0 else {
            if errno == ENOENT || errno == EINTR { return nil }
            throw Self.openingError(Errno(rawValue: errno), path: location.path)
        }
        let item = OwnedDescriptor(taking: fd)
        guard csb_ofd_lock(item.rawValue, CSB_F_WRLCK, 0) == 0, Self.holdsName(item, location) else { return nil }
        return item
    }

    /// Whether the name still leads to the inode `item` holds, and that inode has a name.
    static func holdsName(_ item: OwnedDescriptor, _ location: Location) -> Bool {
        var locked = stat()
        var named = stat()
        return fstat(item.rawValue, &locked) == 0 && fstatat(location.folder.rawValue, location.name, &named, AT_SYMLINK_NOFOLLOW) == 0
            && locked.st_nlink > 0 && named.st_dev == locked.st_dev && named.st_ino == locked.st_ino
    }

    static func openingError(_ error: Errno, path: FilePath) -> CoordinationError {
        switch error {
        case .tooManySymbolicLinkLevels: .link(path)
        case .invalidArgument, Errno(rawValue: ENXIO), .isDirectory: .notARegularFile(path)
        default: .system(operation: "opening", path: path, errno: error)
        }
    }

    private func acquire(_ item: OwnedDescriptor, type: Int16, path: FilePath, deadline: ContinuousClock.Instant?) throws {
        guard let deadline else {
            do { _ = try syscallRetrying { csb_ofd_lock(item.rawValue, type, 1) } } catch {
                throw CoordinationError.system(operation: "locking", path: path, errno: error)
            }
            return
        }
        // F_OFD_SETLKW cannot time out without a signal, which a library may
        // not take over: poll, from 50 µs up to 2 ms between tries.
        // A holder keeps it for microseconds: the first hundred tries only yield.
        var pause: useconds_t = 50
        var tries = 0
        while csb_ofd_lock(item.rawValue, type, 0) != 0 {
            let error = Errno(rawValue: errno)
            guard error == .resourceTemporarilyUnavailable || error == .permissionDenied || error == .interrupted else {
                throw CoordinationError.system(operation: "locking", path: path, errno: error)
            }
            tries += 1
            if tries <= 100 { sched_yield(); continue }
            if ContinuousClock.now >= deadline { throw CoordinationError.timedOut(path, seconds: Self.seconds(timeout)) }
            usleep(pause)
            pause = min(pause * 2, 2_000)
        }
    }

    // MARK: Helpers

    static func folder(of path: FilePath) throws -> OwnedDescriptor {
        let parent = path.removingLastComponent()
        let folder = parent.isEmpty ? FilePath(".") : parent
        do {
            return try .openPath(folder, follow: true)
        } catch {
            throw CoordinationError.system(operation: "opening the folder of", path: path, errno: error)
        }
    }

    /// The last component's bytes, NUL-terminated: names need not be UTF-8.
    static func name(of path: FilePath) throws -> [CChar] {
        guard let last = path.lastComponent, last.kind == .regular else { throw CoordinationError.notARegularFile(path) }
        return FilePath(root: nil, [last]).withPlatformString { Array(UnsafeBufferPointer(start: $0, count: strlen($0) + 1)) }
    }

    static func display(_ name: [CChar]) -> FilePath {
        FilePath(bytes: name.dropLast().map { UInt8(bitPattern: $0) })
    }

    static func writeAll(_ data: [UInt8], to fd: CInt, path: FilePath) throws {
        var offset = 0
        while offset < data.count {
            let written = data.withUnsafeBytes { write(fd, $0.baseAddress! + offset, data.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                throw CoordinationError.system(operation: "writing", path: path, errno: Errno(rawValue: errno))
            }
            offset += written
        }
    }

    static func seconds(_ duration: Duration?) -> Double {
        guard let duration else { return .infinity }
        return Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

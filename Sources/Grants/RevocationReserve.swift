@preconcurrency import Glibc
import CSyscalls
import Crypto
import Sandbox
import SystemPackage

/// Revocations that need no free space: `revocations` in the state folder,
/// a file of fixed size written whole (real blocks, synced) while there is
/// room, when the state is made or at a later write of the ledger.
///
/// A full disk must not block a revocation: the confined command shares the
/// filesystem with the ledger (containers and state are both under the
/// user's XDG folders) and may fill it, and then SQLite can write nothing
/// (`database or disk is full`) and, with no connection open, not even read
/// (its -shm cannot grow). `revoke` therefore first writes what it revokes
/// into a free slot here, over blocks the file already has (pwrite and
/// fdatasync: no allocation on tmpfs, ext4 or xfs; on btrfs the file is made
/// NOCOW so that it is overwritten in place), and only then writes the
/// ledger. Where the ledger write fails, the slot alone makes the grants
/// resolve as revoked: every read of the ledger applies the held slots
/// (`Ledger`, and the launch cache's path in `GrantBroker`), and the
/// launchers' watch of the state folder wakes on the write. The next write
/// of the ledger that succeeds folds the held revocations in, in one
/// transaction, and frees their slots.
///
///     slot 0: the header, "sandboxed-run revocation reserve 1\n", zeros
///     slots 1...31, 512 bytes each (one sector: a torn write spoils one slot):
///       kind: u8 (0 free, 1 grant id, 2 app, 3 folder handle) | length: u8 |
///       time: i64 LE | value: `length` bytes | zeros | SHA-256 of bytes 0..<480
///
/// A slot names what was revoked as `revoke` named it (one grant, every grant
/// of an app, every grant of a folder), so one slot holds any number of
/// grants. Nothing is inserted into the ledger while a slot is held (every
/// change folds first), so an app's or folder's slot means exactly the
/// grants the ledger holds. A slot whose checksum fails was torn by a crash
/// in mid-write, before `revoke` said anything: it is ignored, and free.
///
/// Trusted as every state file is (`StateDirectory.checkPrivate`): the
/// user's private regular file, of exactly `fileSize` bytes, with the
/// header; anything else is refused, and with it every resolution (fail
/// closed: a damaged reserve may hold revocations).
struct RevocationReserve {
    static let fileName = "revocations"
    static let slotSize = 512
    static let slotCount = 31
    static let fileSize = slotSize * (slotCount + 1)
    static let header: [UInt8] = {
        let text = Array("sandboxed-run revocation reserve 1\n".utf8)
        return text + [UInt8](repeating: 0, count: slotSize - text.count)
    }()
    private static let checksumOffset = slotSize - 32

    /// What one slot revokes.
    enum Target: Equatable, Sendable {
        case grant(GrantID)
        case app(String)
        case folder(handle: [UInt8])

        var kind: UInt8 {
            switch self {
            case .grant: 1
            case .app: 2
            case .folder: 3
            }
        }

        var value: [UInt8] {
            switch self {
            case .grant(let id): id.digest
            case .app(let app): Array(app.utf8)
            case .folder(let handle): handle
            }
        }

        func covers(_ record: GrantRecord) -> Bool {
            switch self {
            case .grant(let id): record.id == id
            case .app(let app): record.app == app
            case .folder(let handle): record.handle == handle
            }
        }
    }

    /// A held revocation and the slot it is in.
    struct Entry: Equatable, Sendable {
        let target: Target
        let time: Int64
        let slot: Int
    }

    let state: StateDirectory
    let file: OwnedDescriptor
    /// The revocations held now, as read when opened.
    private(set) var entries: [Entry]
    /// Slots a new revocation may take.
    private(set) var free: [Int]

    var path: String { Self.path(in: state) }
    static func path(in state: StateDirectory) -> String { state.path + "/" + fileName }

    // MARK: Reading

    /// The reserve, checked and read; nil when there is none (a state made
    /// before reserves existed, until its next write with room).
    static func open(in state: StateDirectory) throws(GrantError) -> RevocationReserve? {
        let shown = path(in: state)
        guard let vetted = try StateDirectory.statPrivateFile(fileName, in: state.descriptor, path: shown) else { return nil }
        let file: OwnedDescriptor
        let status: stat
        do {
            file = OwnedDescriptor(taking: try syscallRetrying {
                openat(state.descriptor.rawValue, fileName, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
            })
            status = try file.status()
        } catch .noSuchFileOrDirectory {
            return nil
        } catch .permissionDenied, .readOnlyFileSystem {
            // A state the user made read-only: read it all the same (nothing can be revoked there anyway).
            return try openReadOnly(in: state, vetted: vetted)
        } catch {
            throw .stateDirectory(step: "opening \(shown)", errno: error)
        }
        return try read(file: file, status: status, vetted: vetted, state: state)
    }

    private static func openReadOnly(in state: StateDirectory, vetted: stat) throws(GrantError) -> RevocationReserve? {
        guard let opened = try StateDirectory.openPrivateFile(fileName, in: state.descriptor, path: path(in: state)) else { return nil }
        return try read(file: opened.descriptor, status: opened.status, vetted: vetted, state: state)
    }

    private static func read(file: OwnedDescriptor, status: stat, vetted: stat, state: StateDirectory) throws(GrantError) -> RevocationReserve {
        let shown = path(in: state)
        // What was opened is what was checked.
        guard status.st_dev == vetted.st_dev, status.st_ino == vetted.st_ino else {
            throw .stateDirectory(step: "opening \(shown) (it was replaced while being opened)", errno: .resourceTemporarilyUnavailable)
        }
        try StateDirectory.checkPrivate(status, path: shown, kind: S_IFREG)
        let damaged = { (problem: String) in
            GrantError.damagedState(
                path: shown, problem: problem + ": it is not the revocation reserve sandboxed-run wrote, and it may hold revocations",
                fix: "Restore it from a backup. If the disk was never full, remove it (the next grant makes a new one); otherwise remove it, "
                    + "then revoke again what you revoked while the disk was full.")
        }
        guard status.st_size == off_t(fileSize) else { throw damaged("is \(status.st_size) bytes, not \(fileSize)") }
        var bytes = [UInt8](repeating: 0, count: fileSize)
        var done = 0
        while done < fileSize {
            let got: Int
            do {
                got = try syscallRetrying { bytes.withUnsafeMutableBytes { pread(file.rawValue, $0.baseAddress! + done, fileSize - done, off_t(done)) } }
            } catch {
                throw .stateDirectory(step: "reading \(shown)", errno: error)
            }
            guard got > 0 else { throw damaged("ended before \(fileSize) bytes") }
            done += got
        }
        guard bytes[0..<slotSize].elementsEqual(header) else { throw damaged("does not start with its header") }
        var reserve = RevocationReserve(state: state, file: file, entries: [], free: [])
        for slot in 1...slotCount {
            switch decode(bytes[(slot * slotSize)..<((slot + 1) * slotSize)], slot: slot) {
            case .held(let entry): reserve.entries.append(entry)
            case .free: reserve.free.append(slot)
            case .unknown(let kind):
                // A newer sandboxed-run's revocation: never ignored, never overwritten.
                throw damaged("holds in slot \(slot) a revocation of a kind (\(kind)) this sandboxed-run does not know")
            }
        }
        return reserve
    }

    /// The revocations held in `state` now (none without a reserve). Read
    /// before the ledger (or the launch cache) is: a slot freed after its
    /// revocation was folded in is then freed after a change the ledger
    /// read sees, never before (which would read a grant as live that both
    /// call revoked). A grant made just after a fold may meanwhile read as
    /// revoked, which fails closed.
    /// Opened read-only: closing a descriptor opened for writing sends
    /// IN_CLOSE_WRITE, and every launcher that holds a grant watches the
    /// state folder and reads this on each event (one such read woke every
    /// other launcher of the user, and itself, in an endless loop).
    static func held(in state: StateDirectory) throws(GrantError) -> [Entry] {
        let shown = path(in: state)
        guard let vetted = try StateDirectory.statPrivateFile(fileName, in: state.descriptor, path: shown) else { return [] }
        return try openReadOnly(in: state, vetted: vetted)?.entries ?? []
    }

    /// `record` with `revoked` set when a held revocation covers it.
    static func applying(_ entries: [Entry], to record: GrantRecord) -> GrantRecord {
        guard record.revoked == nil, let entry = entries.first(where: { $0.target.covers(record) }) else { return record }
        var revoked = record
        revoked.revoked = entry.time
        return revoked
    }

    // MARK: Writing (under the state's exclusive lock)

    /// Holds `target`, revoked at `time`, in a free slot, synced: from its
    /// return on, the grants it covers read as revoked. A target already
    /// held takes no slot. Throws `.reserveFull` when no slot is free:
    /// nothing is written then.
    mutating func hold(_ target: Target, at time: Int64, named: Set<GrantID>) throws(GrantError) {
        if entries.contains(where: { $0.target == target }) { return }
        guard let slot = free.first else {
            throw .revocationNotRecorded(
                problem: "the revocation reserve \(path) is full: it holds \(entries.count) revocations that the ledger could not take yet",
                fix: "Free space on the filesystem of \(state.path) and run this again: the next write of the ledger takes the held revocations in and frees the reserve.",
                named: named)
        }
        try write(Self.encode(target, time: time), at: slot)
        try sync()
        free.removeFirst()
        entries.append(Entry(target: target, time: time, slot: slot))
    }

    /// Frees the slots of `folded` (written into the ledger), synced.
    mutating func release(_ folded: [Entry]) throws(GrantError) {
        guard !folded.isEmpty else { return }
        for entry in folded { try write([UInt8](repeating: 0, count: Self.slotSize), at: entry.slot) }
        try sync()
        entries.removeAll { entry in folded.contains(entry) }
        free = (free + folded.map(\.slot)).sorted()
    }

    private func write(_ bytes: [UInt8], at slot: Int) throws(GrantError) {
        var done = 0
        while done < bytes.count {
            do {
                done += try syscallRetrying {
                    bytes.withUnsafeBytes { pwrite(file.rawValue, $0.baseAddress! + done, bytes.count - done, off_t(slot * Self.slotSize + done)) }
                }
            } catch {
                throw .stateDirectory(step: "writing \(path)", errno: error)
            }
        }
    }

    private func sync() throws(GrantError) {
        do { _ = try syscallRetrying { fdatasync(file.rawValue) } } catch {
            throw .stateDirectory(step: "syncing \(path)", errno: error)
        }
    }

    /// Makes the reserve when there is none: a new file filled whole and
    /// synced (NOCOW first where the filesystem knows it), then linked in
    /// under its name, never over another (a reserve another process made
    /// meanwhile is kept). Needs room: call while writing the state.
    static func make(in state: StateDirectory) throws(GrantError) {
        let shown = path(in: state)
        if try StateDirectory.statPrivateFile(fileName, in: state.descriptor, path: shown) != nil { return }
        writeInPlace(in: state)
        let folder = state.descriptor.rawValue
        let temporary = fileName + ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        do throws(Errno) {
            // O_TMPFILE (hidden by Glibc): unnamed until it is whole.
            var unnamed = true
            var fd = openat(folder, ".", 0o20000000 | O_DIRECTORY | O_RDWR | O_CLOEXEC, 0o600)
            if fd < 0 {
                guard [EOPNOTSUPP, EISDIR, EINVAL].contains(errno) else { throw Errno(rawValue: errno) }
                unnamed = false
                fd = try syscallRetrying { openat(folder, temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
            }
            let file = OwnedDescriptor(taking: fd)
            defer { if !unnamed { unlinkat(folder, temporary, 0) } }
            // Before any data: btrfs sets NOCOW only on an empty file.
            writeInPlace(file.rawValue)
            if try file.status().st_mode & 0o7777 != 0o600 { _ = try syscallRetrying { fchmod(file.rawValue, 0o600) } }
            // Every byte written (no hole, no fallocate: an unwritten extent
            // may need new metadata when it is first written).
            let bytes = header + [UInt8](repeating: 0, count: fileSize - slotSize)
            var done = 0
            while done < bytes.count {
                done += try syscallRetrying { bytes.withUnsafeBytes { Glibc.write(file.rawValue, $0.baseAddress! + done, bytes.count - done) } }
            }
            _ = try syscallRetrying { fsync(file.rawValue) }
            let linked = unnamed
                ? linkat(AT_FDCWD, "/proc/self/fd/\(file.rawValue)", folder, fileName, AT_SYMLINK_FOLLOW)
                : linkat(folder, temporary, folder, fileName, 0)
            if linked != 0, errno != EEXIST { throw Errno(rawValue: errno) }
            try AtomicFile.syncFolder(state.descriptor)
        } catch {
            throw error == .readOnlyFileSystem || error == .permissionDenied
                ? .readOnlyState(path: state.path, needed: "making the revocation reserve")
                : .stateDirectory(step: "making \(shown)", errno: error)
        }
    }

    // MARK: btrfs

    /// On btrfs, marks `fd` (an empty file, or a folder, whose new files
    /// inherit it) NOCOW: overwritten in place, with no new space needed.
    /// Measured on a full btrfs: a pwrite into a NOCOW file's blocks
    /// succeeds, into a copy-on-write file's it gives ENOSPC, and a write
    /// through a shared mapping of it (SQLite's -shm) raises SIGBUS. NOCOW
    /// files have no btrfs checksums; a snapshot makes the next write of
    /// each block a copy again. Elsewhere nothing is done (no such flag).
    static func writeInPlace(_ fd: CInt) {
        var fsid: UInt64 = 0
        var type: UInt64 = 0
        guard csb_filesystem_identity(fd, &fsid, &type) == 0, type == FolderIdentity.btrfsMagic else { return }
        _ = csb_set_no_copy_on_write(fd)
    }

    /// The state folder made NOCOW on btrfs (best effort), so that the
    /// ledger's -wal and -shm, made again whenever no connection holds the
    /// ledger, can be written on a full disk without SIGBUS (the ledger
    /// file too, when the state is new).
    static func writeInPlace(in state: StateDirectory) {
        guard let folder = try? state.descriptor.reopenedFolder() else { return }
        writeInPlace(folder.rawValue)
    }

    // MARK: Encoding

    static func encode(_ target: Target, time: Int64) -> [UInt8] {
        var slot = [UInt8](repeating: 0, count: slotSize)
        let value = target.value
        slot[0] = target.kind
        slot[1] = UInt8(value.count)
        withUnsafeBytes(of: time.littleEndian) { for (index, byte) in $0.enumerated() { slot[2 + index] = byte } }
        for (index, byte) in value.enumerated() { slot[10 + index] = byte }
        return sealed(slot)
    }

    /// `slot` with its checksum.
    static func sealed(_ slot: [UInt8]) -> [UInt8] {
        var slot = slot
        slot.replaceSubrange(checksumOffset..<slotSize, with: Array(SHA256.hash(data: slot[0..<checksumOffset])))
        return slot
    }

    enum Slot: Equatable {
        case held(Entry)
        /// Never written, freed, or torn (its checksum fails).
        case free
        /// Whole, but of a kind this version does not know.
        case unknown(UInt8)
    }

    static func decode(_ slot: ArraySlice<UInt8>, slot index: Int) -> Slot {
        let base = slot.startIndex
        let kind = slot[base]
        guard kind != 0 else { return .free }
        guard Array(SHA256.hash(data: slot[base..<(base + checksumOffset)])).elementsEqual(slot[(base + checksumOffset)...]) else { return .free }
        let length = Int(slot[base + 1])
        guard 10 + length <= checksumOffset else { return .unknown(kind) }
        let time = slot[(base + 2)..<(base + 10)].reversed().reduce(Int64(0)) { $0 << 8 | Int64($1) }
        let value = Array(slot[(base + 10)..<(base + 10 + length)])
        switch kind {
        case 1 where length == 32: return .held(Entry(target: .grant(GrantID(digest: value)), time: time, slot: index))
        case 2 where length > 0:
            guard let app = String(validating: value, as: UTF8.self) else { return .unknown(kind) }
            return .held(Entry(target: .app(app), time: time, slot: index))
        case 3 where length > 0: return .held(Entry(target: .folder(handle: value), time: time, slot: index))
        default: return .unknown(kind)
        }
    }
}

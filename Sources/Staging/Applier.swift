@preconcurrency import Glibc
import Coordination
import CSyscalls
import SystemKit
import SystemPackage

/// Applies chosen changes to the granted folder, one item at a time, and
/// keeps the manifest true: after each change the clone's item and the
/// folder's agree (applied, or the folder's version copied back into the
/// clone when the folder's is kept), or the change is left staged.
struct Applier {
    let tree: OwnedDescriptor
    let host: OwnedDescriptor
    let hostPath: FilePath
    var entries: ManifestEntries
    var manifest: Manifest { entries.manifest }
    let found: [[UInt8]: TreeItem]
    let coordinator: FileCoordinator
    let savingComputer: String

    /// A placeholder is waited on this long before its item is left staged.
    static let download: Duration = .seconds(60)

    init(tree: OwnedDescriptor, host: OwnedDescriptor, hostPath: FilePath, manifest: Manifest, found: [[UInt8]: TreeItem],
         coordinator: FileCoordinator, savingComputer: String) {
        (self.tree, self.host, self.hostPath, self.entries, self.found, self.coordinator, self.savingComputer) =
            (tree, host, hostPath, ManifestEntries(manifest), found, coordinator, savingComputer)
    }

    private func entry(at path: [UInt8]) -> ManifestEntry? { entries[path] }

    mutating func apply(_ changes: [StagedChange]) throws(StagingError) -> [ReviewOutcome] {
        var outcomes: [ReviewOutcome] = []
        func record(_ change: StagedChange, _ result: ReviewOutcome.Result) { outcomes.append(ReviewOutcome(change: change, result: result)) }
        // Folders first (parents first), then files and links, then what
        // goes away (files, then folders, deepest first), then modes.
        let placing = changes.filter { ($0.kind == .added || $0.kind == .renamed || $0.kind == .modified) }
        for change in placing.filter({ $0.item == .folder }).sorted(by: { $0.path.lexicographicallyPrecedes($1.path) }) {
            record(change, try makeFolder(change))
        }
        // Files in batches: each batch written ahead (unnamed files), the
        // filesystem flushed once, then each put in place under its lock.
        var batch: [Pending] = []
        for change in placing where change.item != .folder {
            if let result = try place(change, batch: &batch) { record(change, result) }
            if batch.count >= Self.batch { for (change, result) in try commit(&batch) { record(change, result) } }
        }
        for (change, result) in try commit(&batch) { record(change, result) }
        var removals: [(change: StagedChange, path: [UInt8])] = []
        for change in changes where change.kind == .deleted { removals.append((change, change.path)) }
        for change in changes where change.kind == .renamed { if let from = change.from { removals.append((change, from)) } }
        for (change, path) in removals where change.item != .folder {
            let result = try remove(change, at: path)
            if change.kind == .deleted { record(change, result) } else if result != .applied { amend(&outcomes, change, result) }
        }
        for (change, path) in removals.filter({ $0.change.item == .folder }).sorted(by: { $0.path.count > $1.path.count }) {
            let result = try removeFolder(change, at: path)
            if change.kind == .deleted { record(change, result) } else if result != .applied { amend(&outcomes, change, result) }
        }
        for change in changes where change.kind == .modeChanged || ((change.kind == .modified || change.kind == .renamed) && change.oldMode != change.newMode && change.item == .folder) {
            let result = try setMode(change)
            if change.kind == .modeChanged { record(change, result) } else if result != .applied { amend(&outcomes, change, result) }
        }
        // Every rename, new folder and removal on disk before accept returns.
        guard csb_syncfs(host.rawValue) == 0 else { throw .system(step: "flushing", path: hostPath.bytes, errno: Errno(rawValue: errno)) }
        return outcomes
    }

    /// Files written ahead in one batch (each holds three descriptors: its
    /// new bytes, its staged file, its folder).
    static let batch = 128

    /// A file written ahead, waiting for its batch's flush and its lock.
    struct Pending {
        let change: StagedChange
        let item: TreeItem
        let location: FileCoordinator.Location
        let expected: ManifestEntry?
        let prepared: FileCoordinator.PreparedReplacement
        let staged: OwnedDescriptor
    }

    /// Flushes the batch's bytes, then puts each file in place if its host
    /// item is still the one staged (else it becomes a conflict).
    private mutating func commit(_ batch: inout [Pending]) throws(StagingError) -> [(StagedChange, ReviewOutcome.Result)] {
        guard !batch.isEmpty else { return [] }
        defer { batch = [] }
        guard csb_syncfs(host.rawValue) == 0 else { throw .system(step: "flushing", path: hostPath.bytes, errno: Errno(rawValue: errno)) }
        var results: [(StagedChange, ReviewOutcome.Result)] = []
        for pending in batch {
            let expected = pending.expected
            let placed: Bool
            do {
                placed = try coordinator.commit(pending.prepared, create: expected == nil) { original in
                    // Made empty under the folder lock for us, or someone's empty file: nothing to lose.
                    expected.map { Status(original).isUnchanged(as: $0.host) } ?? (original.st_size == 0)
                }
            } catch {
                results.append((pending.change, .leftStaged(reason: "\(error)")))
                continue
            }
            guard placed else {
                results.append((pending.change, try conflict(pending.change, staged: pending.staged, location: pending.location)))
                continue
            }
            try finishPlaced(pending.change, item: pending.item)
            results.append((pending.change, .applied))
        }
        return results
    }

    /// The coordinator gave the new file the old one's mode: the staged mode, never set-id.
    private mutating func finishPlaced(_ change: StagedChange, item: TreeItem) throws(StagingError) {
        let mode = item.status.mode & 0o777
        if let placed = HostItem.locate(change.path, in: host), let status = try? placed.status(), UInt32(status.st_mode) & 0o7777 != mode {
            _ = csb_chmod_fd(placed.rawValue, mode)
        }
        try agree(change.path, folderOnly: false)
    }

    /// A rename whose second half (the old name going) did not apply says why.
    private func amend(_ outcomes: inout [ReviewOutcome], _ change: StagedChange, _ result: ReviewOutcome.Result) {
        guard let index = outcomes.firstIndex(where: { $0.change == change }), outcomes[index].result == .applied else { return }
        let reason: String
        switch result {
        case .keptHost(let why), .leftStaged(let why), .refused(let why): reason = why
        default: return
        }
        outcomes[index] = ReviewOutcome(change: change, result: .keptHost(reason: "the new name was applied; the old one stays: \(reason)"))
    }

    private func shown(_ path: [UInt8]) -> FilePath {
        FilePath(bytes: path.isEmpty ? hostPath.bytes : hostPath.bytes + [UInt8(ascii: "/")] + path)
    }

    // MARK: Folders on the way

    /// The host folder at `path`, made (with the clone's bits, never set-id)
    /// where missing. Nil, with why, when something that is not a folder is
    /// in the way (nothing is ever made through a link).
    private func folder(_ path: [UInt8], making: Bool) -> (OwnedDescriptor?, String?) {
        var current: OwnedDescriptor
        do { current = try host.reopenedFolder() } catch { return (nil, "the folder cannot be opened: \(error)") }
        var walked: [UInt8] = []
        for name in path.split(separator: UInt8(ascii: "/")).map(Array.init) where !path.isEmpty {
            walked = walked.isEmpty ? name : walked + [UInt8(ascii: "/")] + name
            if let next = try? OwnedDescriptor.openFolder(name, relativeTo: current, follow: false, use: .read) {
                current = next
                continue
            }
            var status = stat()
            if name.withCString({ fstatat(current.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0 {
                return (nil, "\(Printable.path(bytes: shown(walked).bytes)) is not a folder on the host (a link, or a file)")
            }
            guard making else { return (nil, "\(Printable.path(bytes: shown(walked).bytes)) is not on the host any more") }
            let mode = found[walked].map { mode_t($0.status.mode) & 0o1777 } ?? 0o755
            guard name.withCString({ mkdirat(current.rawValue, $0, 0o700) }) == 0 || errno == EEXIST else {
                return (nil, "making \(Printable.path(bytes: shown(walked).bytes)) failed: \(Errno(rawValue: errno))")
            }
            guard let made = try? OwnedDescriptor.openFolder(name, relativeTo: current, follow: false, use: .read) else {
                return (nil, "\(Printable.path(bytes: shown(walked).bytes)) is not a folder on the host (a link, or a file)")
            }
            _ = fchmod(made.rawValue, mode)
            _ = fsync(current.rawValue)
            current = made
        }
        return (current, nil)
    }

    private mutating func makeFolder(_ change: StagedChange) throws(StagingError) -> ReviewOutcome.Result {
        if change.changedOutside, change.kind != .renamed || HostItem.status(change.path, in: host) != nil {
            return try keepHost(change.path, "something else is at \(Printable.path(bytes: shown(change.path).bytes)) on the host now")
        }
        let (made, problem) = folder(change.path, making: true)
        guard let made else { return .leftStaged(reason: problem ?? "") }
        _ = fsync(made.rawValue)
        try agree(change.path, folderOnly: true)
        return .applied
    }

    // MARK: Files and links

    /// A file written ahead into `batch` (nil), or what became of the change now.
    private mutating func place(_ change: StagedChange, batch: inout [Pending]) throws(StagingError) -> ReviewOutcome.Result? {
        let (parentPath, name) = Resync.split(change.path)
        guard let item = found[change.path] else { return .leftStaged(reason: "it is no longer in the staged tree") }
        switch item.kind {
        case .special:
            try Resync.restore(change.path, tree: tree, host: host, entries: &entries)
            return .refused(reason: "a FIFO, socket or device is never made in the folder")
        case .link:
            return try placeLink(change, parentPath: parentPath, name: name)
        case .folder:
            return .applied
        case .file:
            break
        }
        let (parent, problem) = folder(parentPath, making: true)
        guard let parent else { return .leftStaged(reason: problem ?? "") }
        let location = FileCoordinator.Location(folder: parent, name: name.map { CChar(bitPattern: $0) } + [0], path: shown(change.path))
        if (try? Placeholder.status(of: location)) == .notDownloaded {
            do { try Placeholder.download(location, timeout: Self.download) } catch {
                return .leftStaged(reason: "its placeholder could not be downloaded first: \(error)")
            }
        }
        let staged = try StagedFile.open(change.path, in: tree)
        // The host's item must still be the one staged (or none, for a new name).
        let expected = change.kind == .modified ? entry(at: change.path) : nil
        let now = HostItem.status(change.path, in: host)
        let unchanged = expected.map { HostItem.matches($0, now) } ?? (now == nil)
        guard unchanged else { return try conflict(change, staged: staged, location: location) }
        do {
            if let prepared = try coordinator.prepareReplacement(of: location, copying: staged.rawValue) {
                batch.append(Pending(change: change, item: item, location: location, expected: expected, prepared: prepared, staged: staged))
                return nil
            }
        } catch {
            return .leftStaged(reason: "\(error)")
        }
        // No unnamed files on this filesystem: this one alone, flushed.
        enum Outcome: Error { case changed }
        do {
            try coordinator.coordinate(writing: location, options: .forReplacing) { written in
                var original = stat()
                guard let old = written.original, fstat(old.rawValue, &original) == 0 else { throw Outcome.changed }
                if let expected {
                    guard Status(original).isUnchanged(as: expected.host) else { throw Outcome.changed }
                } else {
                    // Made empty under the folder lock for us, or someone's empty file: nothing to lose.
                    guard original.st_size == 0 else { throw Outcome.changed }
                }
                guard let target = written.descriptor, csb_copy_file_data(target.rawValue, staged.rawValue) == 0 else {
                    throw CoordinationError.system(operation: "writing", path: location.path, errno: Errno(rawValue: errno))
                }
            }
        } catch Outcome.changed {
            return try conflict(change, staged: staged, location: location)
        } catch {
            return .leftStaged(reason: "\(error)")
        }
        try finishPlaced(change, item: item)
        return .applied
    }

    /// The host's item stays; the staged bytes become its conflict version,
    /// and the clone gets the host's item back.
    private mutating func conflict(_ change: StagedChange, staged: OwnedDescriptor, location: FileCoordinator.Location) throws(StagingError) -> ReviewOutcome.Result {
        guard let status = try? staged.status() else { return .leftStaged(reason: "the staged file cannot be read") }
        guard Int(status.st_size) <= FileVersion.largest else {
            return .leftStaged(reason: "it changed on the host since it was staged, and is too large (over \(FileVersion.largest >> 20) MiB) to keep as a conflict version: compare the two with `review diff`")
        }
        // A read that fails keeps the change staged: never a truncated conflict version.
        guard let bytes = try? FileBytes.read(staged, upTo: Int(status.st_size), path: change.path) else {
            return .leftStaged(reason: "the staged file cannot be read")
        }
        let version: FileVersion?
        do {
            version = try coordinator.keepConflictVersion(of: location, contents: bytes, modified: status.st_mtim, savingComputer: savingComputer)
        } catch {
            return .leftStaged(reason: "it changed on the host since it was staged, and keeping the staged bytes as a conflict version failed: \(error)")
        }
        guard let version else {
            return .leftStaged(reason: "it was deleted or replaced by something other than a file on the host since it was staged: accept it again once it is back, or reject it")
        }
        try Resync.restore(change.path, tree: tree, host: host, entries: &entries)
        return .conflict(version: version.identifier)
    }

    private mutating func placeLink(_ change: StagedChange, parentPath: [UInt8], name: [UInt8]) throws(StagingError) -> ReviewOutcome.Result {
        guard let cloneParent = HostItem.locate(parentPath, in: tree) else { return .leftStaged(reason: "it is no longer in the staged tree") }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = name.withCString { readlinkat(cloneParent.rawValue, $0, &buffer, Int(PATH_MAX)) }
        guard length >= 0 else { return .leftStaged(reason: "the staged link cannot be read") }
        let text = buffer[0..<length].map { UInt8(bitPattern: $0) }
        guard Self.staysInside(text, at: parentPath) else {
            try Resync.restore(change.path, tree: tree, host: host, entries: &entries)
            return .refused(reason: "a link that leads out of the folder (\(Printable.path(bytes: text))) is never made")
        }
        // A changed link replaces the host's only while that is the link staged; a new one goes only where nothing is.
        let expected = change.kind == .modified ? entry(at: change.path) : nil
        let now = HostItem.status(change.path, in: host)
        if let expected {
            guard HostItem.matches(expected, now) else { return try keepHost(change.path, "it changed on the host since it was staged") }
        } else if now != nil || change.changedOutside {
            return try keepHost(change.path, "something is at \(Printable.path(bytes: shown(change.path).bytes)) on the host now")
        }
        let (parent, problem) = folder(parentPath, making: true)
        guard let parent else { return .leftStaged(reason: problem ?? "") }
        let temporary = Array(".sandboxed-run-link-\(UInt64.random(in: 0...UInt64.max))".utf8)
        guard (text + [0]).withUnsafeBufferPointer({ target in
            temporary.withCString { symlinkat(UnsafeRawPointer(target.baseAddress!).assumingMemoryBound(to: CChar.self), parent.rawValue, $0) }
        }) == 0 else {
            return .leftStaged(reason: "making the link failed: \(Errno(rawValue: errno))")
        }
        let renamed = temporary.withCString { old in
            name.withCString { expected == nil ? csb_rename_noreplace(parent.rawValue, old, parent.rawValue, $0) : renameat(parent.rawValue, old, parent.rawValue, $0) }
        }
        if renamed != 0 {
            _ = temporary.withCString { unlinkat(parent.rawValue, $0, 0) }
            return try keepHost(change.path, "something is at \(Printable.path(bytes: shown(change.path).bytes)) on the host now")
        }
        _ = fsync(parent.rawValue)
        try agree(change.path, folderOnly: false)
        return .applied
    }

    /// Whether a link's text, read from its folder, stays below the granted
    /// folder. Its ".."s come first: the folder a link is in is reached
    /// through no link, but a name in the text may be one ("b -> ."), and
    /// the kernel resolves "b/.." as the parent of b's target, not as "".
    static func staysInside(_ text: [UInt8], at folder: [UInt8]) -> Bool {
        guard !text.isEmpty, text.first != UInt8(ascii: "/") else { return false }
        var depth = folder.isEmpty ? 0 : folder.split(separator: UInt8(ascii: "/")).count
        var descended = false
        for name in text.split(separator: UInt8(ascii: "/")) {
            if name.elementsEqual([0x2E, 0x2E]) {
                depth -= 1
                if depth < 0 || descended { return false }
            } else if !name.elementsEqual([0x2E]) {
                depth += 1
                descended = true
            }
        }
        return true
    }

    // MARK: What goes away

    private mutating func remove(_ change: StagedChange, at path: [UInt8]) throws(StagingError) -> ReviewOutcome.Result {
        guard let expected = entry(at: path) else { return .applied }
        let (parentPath, name) = Resync.split(path)
        let (parent, problem) = folder(parentPath, making: false)
        guard let parent else {
            if HostItem.status(path, in: host) == nil { try forget(path); return .applied }
            return .leftStaged(reason: problem ?? "")
        }
        guard HostItem.matches(expected, HostItem.status(path, in: host)) else {
            if HostItem.status(path, in: host) == nil { try forget(path); return .applied }
            return try keepHost(path, "it changed on the host since it was staged")
        }
        if expected.kind == .link {
            guard name.withCString({ unlinkat(parent.rawValue, $0, 0) }) == 0 else {
                return .leftStaged(reason: "removing it failed: \(Errno(rawValue: errno))")
            }
            _ = fsync(parent.rawValue)
            try forget(path)
            return .applied
        }
        let location = FileCoordinator.Location(folder: parent, name: name.map { CChar(bitPattern: $0) } + [0], path: shown(path))
        enum Outcome: Error { case changed }
        do {
            try coordinator.coordinate(writing: location, options: .forDeleting) { _ in
                var status = stat()
                guard name.withCString({ fstatat(parent.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0,
                      Status(status).isUnchanged(as: expected.host) else { throw Outcome.changed }
                guard name.withCString({ unlinkat(parent.rawValue, $0, 0) }) == 0 else {
                    throw CoordinationError.system(operation: "removing", path: location.path, errno: Errno(rawValue: errno))
                }
            }
        } catch Outcome.changed {
            return try keepHost(path, "it changed on the host since it was staged")
        } catch {
            return .leftStaged(reason: "\(error)")
        }
        try forget(path)
        return .applied
    }

    private mutating func removeFolder(_ change: StagedChange, at path: [UInt8]) throws(StagingError) -> ReviewOutcome.Result {
        guard let expected = entry(at: path) else { return .applied }
        let (parentPath, name) = Resync.split(path)
        guard let now = HostItem.status(path, in: host) else { try forget(path); return .applied }
        guard HostItem.matches(expected, now), let parent = folder(parentPath, making: false).0 else {
            return try keepHost(path, "it was replaced on the host since it was staged")
        }
        guard name.withCString({ unlinkat(parent.rawValue, $0, AT_REMOVEDIR) }) == 0 else {
            if errno == ENOTEMPTY || errno == EEXIST {
                return try keepHost(path, "it holds items on the host that were not staged (added since, or kept above)")
            }
            return .leftStaged(reason: "removing it failed: \(Errno(rawValue: errno))")
        }
        _ = fsync(parent.rawValue)
        try forget(path)
        return .applied
    }

    private mutating func setMode(_ change: StagedChange) throws(StagingError) -> ReviewOutcome.Result {
        guard let expected = entry(at: change.path), let newMode = change.newMode else { return .applied }
        guard let item = HostItem.locate(change.path, in: host), let status = try? item.status(), HostItem.matches(expected, Status(status)) else {
            return try keepHost(change.path, "it changed on the host since it was staged")
        }
        let mode = newMode & (change.item == .folder ? 0o1777 : 0o777)
        guard change.item != .link else { return .applied }
        guard csb_chmod_fd(item.rawValue, mode) == 0 else { return .leftStaged(reason: "chmod failed: \(Errno(rawValue: errno))") }
        try agree(change.path, folderOnly: true)
        return .applied
    }

    // MARK: The manifest

    /// The clone's and the folder's items at `path` now agree: record both.
    private mutating func agree(_ path: [UInt8], folderOnly: Bool) throws(StagingError) {
        guard let item = found[path], let hostStatus = HostItem.status(path, in: host) else { return }
        // Only this path's entry: a rename's old name keeps its own until it is removed on the host too.
        var cloneStatus = item.status
        if let clone = HostItem.locate(path, in: tree), let now = try? clone.status() { cloneStatus = Status(now) }
        entries.set(ManifestEntry(path: path, kind: item.kind, host: hostStatus, clone: item.identity, cloneStatus: cloneStatus))
    }

    /// The item at `path` is gone on both sides.
    private mutating func forget(_ path: [UInt8]) throws(StagingError) {
        entries.remove(path)
    }

    /// The folder's item stays: the clone gets it back.
    private mutating func keepHost(_ path: [UInt8], _ reason: String) throws(StagingError) -> ReviewOutcome.Result {
        try Resync.restore(path, tree: tree, host: host, entries: &entries)
        return .keptHost(reason: reason)
    }
}

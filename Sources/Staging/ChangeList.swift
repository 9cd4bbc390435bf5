@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// The clone against its manifest: each item is matched by its identity
/// (a file handle, never reused), so a rename is a rename, and an item
/// deleted whose inode number a new file got at once is still "deleted"
/// plus "added".
enum ChangeList {
    static func compute(tree: OwnedDescriptor, manifest: Manifest, host: OwnedDescriptor?) throws(StagingError) -> StagedChanges {
        var found: [TreeItem] = []
        found.append(TreeItem(path: [], kind: .folder, identity: try Clone.identity(of: tree, path: []), status: try Clone.statusOf(tree, [])))
        try TreeWalk.walk(tree, context: ()) { (entry, _) throws(StagingError) -> Void? in
            let identity = entry.kind == .special ? [] : try Clone.identity(of: entry.name, in: entry.parent, path: entry.path)
            found.append(TreeItem(path: entry.path, kind: entry.kind, identity: identity, status: Status(entry.status)))
            return entry.kind == .folder ? () : nil
        }
        var byIdentity: [[UInt8]: Int] = [:]
        for (index, entry) in manifest.entries.enumerated() where !entry.clone.isEmpty {
            byIdentity[entry.clone] = index
        }
        var seen = Set<Int>()
        var changes: [StagedChange] = []
        for item in found {
            guard !item.identity.isEmpty, let index = byIdentity[item.identity], manifest.entries[index].kind == item.kind else {
                changes.append(StagedChange(
                    kind: .added, path: item.path, from: nil, item: item.kind, contentsChanged: true, oldMode: nil,
                    newMode: item.status.mode & 0o7777, changedOutside: false))
                continue
            }
            seen.insert(index)
            let entry = manifest.entries[index]
            let contents = try contentsDiffer(item, entry, tree: tree, host: host)
            let oldMode = entry.cloneStatus.mode & 0o7777, newMode = item.status.mode & 0o7777
            let kind: StagedChange.Kind
            if entry.path != item.path {
                kind = .renamed
            } else if contents {
                kind = .modified
            } else if oldMode != newMode {
                kind = .modeChanged
            } else {
                continue
            }
            changes.append(StagedChange(
                kind: kind, path: item.path, from: kind == .renamed ? entry.path : nil, item: item.kind, contentsChanged: contents,
                oldMode: oldMode, newMode: newMode, changedOutside: false))
        }
        for (index, entry) in manifest.entries.enumerated() where index != 0 && entry.kind != .special && !seen.contains(index) {
            changes.append(StagedChange(
                kind: .deleted, path: entry.path, from: nil, item: entry.kind, contentsChanged: true, oldMode: entry.cloneStatus.mode & 0o7777,
                newMode: nil, changedOutside: false))
        }
        changes = try merged(changes, found: found, manifest: manifest, tree: tree, host: host)
        changes.sort { $0.path == $1.path ? $0.kind.rawValue < $1.kind.rawValue : $0.path.lexicographicallyPrecedes($1.path) }
        if let host {
            let byPath = Dictionary(manifest.entries.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
            for index in changes.indices {
                changes[index].changedOutside = changedOutside(changes[index], byPath: byPath, host: host)
            }
        }
        return StagedChanges(changes: changes, manifest: manifest, found: Dictionary(found.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first }))
    }

    /// An item deleted and another of its kind added at the same path is one
    /// change of that path: an editor that saves by writing a new file and
    /// renaming it over the old one modified the file, and `rm -r d; mkdir d`
    /// replaced the folder's contents (each listed) but not the folder.
    private static func merged(
        _ changes: [StagedChange], found: [TreeItem], manifest: Manifest, tree: OwnedDescriptor, host: OwnedDescriptor?
    ) throws(StagingError) -> [StagedChange] {
        let deleted = Dictionary(changes.filter { $0.kind == .deleted }.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        let entries = Dictionary(manifest.entries.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        let items = Dictionary(found.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        var replaced = Set<[UInt8]>()
        var out: [StagedChange] = []
        for change in changes where change.kind == .added {
            guard let gone = deleted[change.path], gone.item == change.item, let entry = entries[change.path], let item = items[change.path] else {
                out.append(change)
                continue
            }
            replaced.insert(change.path)
            let oldMode = entry.cloneStatus.mode & 0o7777, newMode = item.status.mode & 0o7777
            let contents: Bool
            switch item.kind {
            case .file: contents = try bytesDiffer(item, entry, tree: tree, host: host)
            case .link: contents = linkText(change.path, in: tree) != host.flatMap({ linkText(change.path, in: $0) })
            default: contents = false
            }
            if contents {
                out.append(StagedChange(kind: .modified, path: change.path, from: nil, item: item.kind, contentsChanged: true, oldMode: oldMode, newMode: newMode, changedOutside: false))
            } else if oldMode != newMode, item.kind != .link {
                out.append(StagedChange(kind: .modeChanged, path: change.path, from: nil, item: item.kind, contentsChanged: false, oldMode: oldMode, newMode: newMode, changedOutside: false))
            }
        }
        out += changes.filter { $0.kind != .added && !($0.kind == .deleted && replaced.contains($0.path)) }
        return out
    }

    /// A link's text, its folder reached through no link.
    static func linkText(_ path: [UInt8], in folder: OwnedDescriptor) -> [UInt8]? {
        let (parentPath, name) = Resync.split(path)
        guard let parent = HostItem.locate(parentPath, in: folder) else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = name.withCString { readlinkat(parent.rawValue, $0, &buffer, Int(PATH_MAX)) }
        guard length >= 0 else { return nil }
        return buffer[0..<length].map { UInt8(bitPattern: $0) }
    }

    /// A file's bytes against the host's, when the host's is still what was staged; else "differ".
    private static func bytesDiffer(_ item: TreeItem, _ entry: ManifestEntry, tree: OwnedDescriptor, host: OwnedDescriptor?) throws(StagingError) -> Bool {
        if item.status.size != entry.host.size { return true }
        guard let host, let original = HostItem.open(entry.path, in: host, flags: O_RDONLY),
              let status = try? original.status(), Status(status).isUnchanged(as: entry.host) else { return true }
        guard let staged = try? StagedFile.open(item.path, in: tree) else { return true }
        return !sameBytes(staged, original)
    }

    /// Whether a file's bytes differ from what was staged. Untouched (the
    /// clone's ctime, which no process can set, has not moved): no. A new
    /// size: yes. Otherwise the bytes are compared with the host's file when
    /// that is still what was copied; when it is not, the answer is yes.
    private static func contentsDiffer(_ item: TreeItem, _ entry: ManifestEntry, tree: OwnedDescriptor, host: OwnedDescriptor?) throws(StagingError) -> Bool {
        guard item.kind == .file else { return false }
        if item.status.changed == entry.cloneStatus.changed { return false }
        if item.status.size != entry.cloneStatus.size { return true }
        return try bytesDiffer(item, entry, tree: tree, host: host)
    }

    private static func sameBytes(_ a: OwnedDescriptor, _ b: OwnedDescriptor) -> Bool {
        var left = [UInt8](repeating: 0, count: 65536), right = left
        var offset: off_t = 0
        while true {
            let count = (try? syscallRetrying { pread(a.rawValue, &left, left.count, offset) }) ?? -1
            let other = (try? syscallRetrying { pread(b.rawValue, &right, right.count, offset) }) ?? -2
            guard count == other, count >= 0 else { return false }
            if count == 0 { return true }
            guard left[0..<count] == right[0..<count] else { return false }
            offset += off_t(count)
        }
    }

    /// Whether the host's side moved on since the grant was staged.
    private static func changedOutside(_ change: StagedChange, byPath: [[UInt8]: ManifestEntry], host: OwnedDescriptor) -> Bool {
        let now = HostItem.status(change.path, in: host)
        switch change.kind {
        case .added:
            // Something there now that was not: unless both are folders (the contents merge).
            guard let now else { return false }
            return !(change.item == .folder && ItemKind(mode: mode_t(now.mode)) == .folder)
        case .renamed:
            guard let entry = change.from.flatMap({ byPath[$0] }) else { return true }
            if let target = now, !(change.item == .folder && ItemKind(mode: mode_t(target.mode)) == .folder) { return true }
            return !HostItem.matches(entry, HostItem.status(entry.path, in: host))
        case .modified, .modeChanged, .deleted:
            guard let entry = byPath[change.path] else { return true }
            return !HostItem.matches(entry, now)
        }
    }
}

/// Items of the granted folder, reached below its descriptor through no
/// link and across no mount.
enum HostItem {
    /// The regular file at `path` below `folder`, opened with `flags`
    /// (O_NONBLOCK added): nil when missing, not a file, or not reachable so.
    static func open(_ path: [UInt8], in folder: OwnedDescriptor, flags: CInt) -> OwnedDescriptor? {
        guard let located = locate(path, in: folder) else { return nil }
        // Through the O_PATH descriptor's own /proc link (a magic link, so
        // no O_NOFOLLOW): the inode found below the folder, nothing else.
        guard let status = try? located.status(), status.st_mode & S_IFMT == S_IFREG else { return nil }
        let fd = "/proc/self/fd/\(located.rawValue)".withCString { Glibc.open($0, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
        return fd >= 0 ? OwnedDescriptor(taking: fd) : nil
    }

    /// O_PATH of `path` below `folder`, no link anywhere on the way, nor at the end.
    static func locate(_ path: [UInt8], in folder: OwnedDescriptor) -> OwnedDescriptor? {
        let name = path.isEmpty ? [UInt8(ascii: ".")] : path
        let fd = try? syscallRetrying { name.withCString { csb_openat2_path_strictly_beneath(folder.rawValue, $0) } }
        return fd.map(OwnedDescriptor.init(taking:))
    }

    static func status(_ path: [UInt8], in folder: OwnedDescriptor) -> Status? {
        guard let item = locate(path, in: folder), let status = try? item.status() else { return nil }
        return Status(status)
    }

    /// Whether the host's item is still the one staged: for a file or link
    /// every field; for a folder the same inode (its contents are its items').
    static func matches(_ entry: ManifestEntry, _ now: Status?) -> Bool {
        guard let now else { return false }
        if entry.kind == .folder { return now.device == entry.host.device && now.inode == entry.host.inode && now.mode == entry.host.mode }
        return now.isUnchanged(as: entry.host)
    }
}

/// Files of the clone, opened for reading through no link.
enum StagedFile {
    static func open(_ path: [UInt8], in tree: OwnedDescriptor) throws(StagingError) -> OwnedDescriptor {
        guard let located = HostItem.locate(path, in: tree) else { throw .system(step: "opening the staged", path: path, errno: .noSuchFileOrDirectory) }
        guard let status = try? located.status(), status.st_mode & S_IFMT == S_IFREG else {
            throw .system(step: "opening the staged", path: path, errno: .invalidArgument)
        }
        let fd = "/proc/self/fd/\(located.rawValue)".withCString { Glibc.open($0, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
        guard fd >= 0 else { throw .system(step: "opening the staged", path: path, errno: Errno(rawValue: errno)) }
        return OwnedDescriptor(taking: fd)
    }
}

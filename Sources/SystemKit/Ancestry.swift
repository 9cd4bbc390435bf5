@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Where a folder sits, judged by inodes along "..", as Landlock judges it:
/// symlinks, bind mounts and renames change nothing. Only meaningful while
/// the folders are pinned by open descriptors (ext4 reuses inode numbers).
public enum Ancestry {
    /// The one way up: calls `visit` with each folder from `start` (a
    /// folder) up to "/", each opened (O_PATH) and with its status, until
    /// `visit` returns false or "/" was visited. A walk that cannot go on
    /// throws: callers count that as a refusal (fail closed).
    package static func walkUp(from start: OwnedDescriptor, _ visit: (OwnedDescriptor, stat) throws(Errno) -> Bool) throws(Errno) {
        var current = start
        var previous: InodeIdentity?
        for _ in 0..<4096 {
            let status = try current.status()
            if status.inodeIdentity == previous { return }  // ".." of "/" is "/"
            guard try visit(current, status) else { return }
            previous = status.inodeIdentity
            current = try parent(of: current)
        }
        throw .tooManySymbolicLinkLevels  // a 4,096-deep tree: treat as unresolvable
    }

    /// One step up: the folder's "..", opened (O_PATH, no link followed).
    package static func parent(of folder: OwnedDescriptor) throws(Errno) -> OwnedDescriptor {
        OwnedDescriptor(taking: try syscallRetrying { csb_open_path(folder.rawValue, "..", 0) })
    }

    /// The identity of the inode `fd` holds and of every folder above it, up to "/".
    package static func chain(of fd: OwnedDescriptor) throws(Errno) -> [InodeIdentity] {
        let status = try fd.status()
        var result: [InodeIdentity] = []
        var start = fd
        if !status.isDirectory {
            // A file has no "..": take the folder the kernel names for it and
            // prove that name still holds this very inode.
            result.append(status.inodeIdentity)
            start = try folder(holding: fd, identity: status.inodeIdentity)
        }
        try walkUp(from: start) { _, status in
            result.append(status.inodeIdentity)
            return true
        }
        return result
    }

    /// Whether `target` (whose `status` is given) is one of `roots` or lies
    /// beneath one, walking parents by inode as Landlock does, without
    /// opening a descriptor per level: one fstatat of "../.." each, the start
    /// moved up every 64 levels (a deep folder costs 64 names per level, not
    /// its depth). `folder`: the folder a non-directory was found in, if
    /// known; else `holder` finds it (nil: cannot be proven, false).
    package static func isBeneath(
        _ target: OwnedDescriptor, status: stat, folder: OwnedDescriptor?, roots: Set<InodeIdentity>,
        holder: (OwnedDescriptor, InodeIdentity) -> OwnedDescriptor?
    ) throws(Errno) -> Bool {
        if roots.contains(status.inodeIdentity) { return true }
        var current: OwnedDescriptor
        if status.isDirectory {
            current = target
        } else if let found = folder ?? holder(target, status.inodeIdentity) {
            current = found
        } else {
            return false
        }
        var identity = try current.status().inodeIdentity
        let stride = 64
        var level = 0
        for _ in 0..<4096 {
            if roots.contains(identity) { return true }
            if level == stride {
                current = try OwnedDescriptor(taking: syscallRetrying { csb_open_ancestor(current.rawValue, Int32(stride)) })
                level = 0
            }
            level += 1
            var device: UInt64 = 0
            var inode: UInt64 = 0
            _ = try syscallRetrying { csb_ancestor_identity(current.rawValue, Int32(level), &device, &inode) }
            let parentIdentity = InodeIdentity(device: device, inode: inode)
            if parentIdentity == identity { return false }  // reached /
            identity = parentIdentity
        }
        return false
    }

    /// What fstat said of an inode when it was opened: kept with its
    /// descriptor, so that a check need not ask again.
    package struct Inode: Sendable {
        package let identity: InodeIdentity
        package let isDirectory: Bool

        package init(_ status: stat) {
            identity = status.inodeIdentity
            isDirectory = status.isDirectory
        }
    }

    /// Walks chains, remembering each folder's parent on the way: one entry
    /// per folder, so memory grows with the folders seen, not with their
    /// depth squared (a child can make folders thousands deep). The memory is
    /// right only while nothing is renamed: fine within one launch's checks,
    /// and for the denial observer, which only predicts.
    package final class Walker {
        /// A folder's parent; "/" is its own.
        private var parents: [InodeIdentity: InodeIdentity] = [:]
        private let limit: Int

        package init(limit: Int = 100_000) { self.limit = limit }

        /// How many folders it remembers (one identity each).
        package var remembered: Int { parents.count }

        /// The identities of the folders callers named for files: sixty /etc
        /// files share one /etc descriptor, which is then asked once. A short
        /// list (a launch names a handful), not a dictionary: a new key type
        /// costs the runtime a scan of every conformance in the binary.
        private var folderIdentities: [(folder: OwnedDescriptor, identity: InodeIdentity)] = []

        /// `folder`: the folder a file was opened in by name, if known.
        /// `known`: what fstat said of `fd` when it was opened, if it was.
        package func chain(of fd: OwnedDescriptor, folder: OwnedDescriptor? = nil, known: Inode? = nil) -> [InodeIdentity]? {
            guard let inode = known ?? (try? fd.status()).map(Inode.init) else { return nil }
            if inode.isDirectory { return try? walk(fd, inode.identity) }
            let found = folder ?? (try? Ancestry.folder(holding: fd, identity: inode.identity))
            guard let found, let folderIdentity = identity(of: found, remember: folder != nil),
                  let chain = try? walk(found, folderIdentity) else { return nil }
            return [inode.identity] + chain
        }

        private func identity(of folder: OwnedDescriptor, remember: Bool) -> InodeIdentity? {
            if let known = folderIdentities.first(where: { $0.folder === folder }) { return known.identity }
            guard let identity = (try? folder.status())?.inodeIdentity else { return nil }
            if remember { folderIdentities.append((folder, identity)) }
            return identity
        }

        private func walk(_ start: OwnedDescriptor, _ identity: InodeIdentity) throws(Errno) -> [InodeIdentity] {
            if parents.count > limit { parents.removeAll() }  // bounded memory, whatever the child makes
            var chain = [identity]
            var learned: [(InodeIdentity, InodeIdentity)] = []
            var current: OwnedDescriptor? = start  // nil once the walk follows the memory
            while chain.count <= 4096 {
                let here = chain[chain.count - 1]
                if let known = parents[here] {
                    // Every remembered folder's ancestors are remembered: a walk is kept only whole.
                    if known == here { return keep(learned, chain) }
                    chain.append(known)
                    current = nil
                    continue
                }
                guard let folder = current else { throw .noSuchFileOrDirectory }  // cannot happen; fail closed
                let parent = try Ancestry.parent(of: folder)
                let parentIdentity = try parent.status().inodeIdentity
                learned.append((here, parentIdentity))
                if parentIdentity == here { return keep(learned, chain) }  // "/"
                chain.append(parentIdentity)
                current = parent
            }
            throw .tooManySymbolicLinkLevels  // a 4,096-deep tree: treat as unresolvable
        }

        private func keep(_ learned: [(InodeIdentity, InodeIdentity)], _ chain: [InodeIdentity]) -> [InodeIdentity] {
            for (folder, parent) in learned { parents[folder] = parent }
            return chain
        }
    }

    /// The folder that holds `file` (not a folder) under the name the kernel
    /// keeps for it, opened from `root` (nil: this process's "/"; a
    /// sandboxed command's root resolves it as the command would, with
    /// RESOLVE_IN_ROOT) and proven to hold this very inode under that name.
    /// With `unlinked`, a file without a name ("#INODE (deleted)", as
    /// O_TMPFILE makes) gets the folder it was made in, taken on its word:
    /// only to predict where a link of it goes. On bytes: this runs at every launch.
    package static func folder(
        holding file: OwnedDescriptor, identity: InodeIdentity, root: OwnedDescriptor? = nil, unlinked allowed: Bool = false
    ) throws(Errno) -> OwnedDescriptor {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/fd/\(file.rawValue)", &buffer, Int(PATH_MAX))
        if length < 0, errno == ENAMETOOLONG { throw .fileNameTooLong }  // deeper than PATH_MAX: said as such
        let slash = CChar(UInt8(ascii: "/"))
        guard length > 1, length < Int(PATH_MAX), buffer[0] == slash else { throw .noSuchFileOrDirectory }
        var name = Array(buffer[0..<length])
        let deleted = Array(" (deleted)".utf8).map { CChar(bitPattern: $0) }
        let unlinked = name.count > deleted.count && Array(name.suffix(deleted.count)) == deleted
        if unlinked {
            guard allowed else { throw .noSuchFileOrDirectory }  // deleted, or not on a path at all
            name.removeLast(deleted.count)
        }
        guard let last = name.lastIndex(of: slash), last + 1 < name.count else { throw .noSuchFileOrDirectory }
        let folderPath = (last == 0 ? [slash] : Array(name[..<last])) + [0]
        let folder = OwnedDescriptor(taking: try syscallRetrying {
            root.map { csb_openat2_path_in_root($0.rawValue, folderPath, 0) } ?? csb_openat2_path(AT_FDCWD, folderPath, 0)
        })
        if unlinked {
            // Only an O_TMPFILE file keeps a folder after its last name is gone: its name is "#INODE".
            guard name[last + 1] == CChar(UInt8(ascii: "#")) else { throw .noSuchFileOrDirectory }
            return folder
        }
        var entry = stat()
        let leaf = Array(name[(last + 1)...]) + [0]
        guard fstatat(folder.rawValue, leaf, &entry, AT_SYMLINK_NOFOLLOW) == 0, entry.inodeIdentity == identity else {
            throw .noSuchFileOrDirectory
        }
        return folder
    }

    /// What `firstOverlap` found.
    package enum Overlap: Equatable {
        /// Item `item` is, holds or lies inside protected folder `protected`.
        case overlap(item: Int, protected: Int)
        /// Their places could not be proven apart (a walk failed): a refusal too.
        case unproven(item: Int, protected: Int, Errno)
    }

    /// The one check that nothing exposes a protected folder: the first item
    /// (a descriptor, with the folder it was opened in and what fstat said
    /// of it, when known) that is, holds or lies inside one of `protected`
    /// (nil: absent, nothing to overlap), compared by inode along "..", as
    /// Landlock applies rules, so links and renames change nothing. Items
    /// share one memoising walker; each protected folder is walked on its own,
    /// with no memory (the parent of a mount's root depends on the mount it
    /// was reached through). A walk that fails is `unproven`: fail closed.
    package static func firstOverlap(
        of items: [(descriptor: OwnedDescriptor, folder: OwnedDescriptor?, inode: Inode?)], among protected: [OwnedDescriptor?]
    ) -> Overlap? {
        let guarded: [Result<[InodeIdentity], Errno>?] = protected.map { folder -> Result<[InodeIdentity], Errno>? in
            guard let folder else { return nil }
            do throws(Errno) { return .success(try chain(of: folder)) } catch { return .failure(error) }
        }
        guard guarded.contains(where: { $0 != nil }) else { return nil }
        let walker = Walker()
        for (index, item) in items.enumerated() {
            let itemChain = walker.chain(of: item.descriptor, folder: item.folder, known: item.inode)
            for (place, guardedChain) in guarded.enumerated() {
                guard let guardedChain else { continue }
                guard let itemChain else { return .unproven(item: index, protected: place, .ioError) }
                switch guardedChain {
                case .failure(let error): return .unproven(item: index, protected: place, error)
                case .success(let chain): if overlaps(itemChain, chain) { return .overlap(item: index, protected: place) }
                }
            }
        }
        return nil
    }

    /// The same for one folder (a grant being made or resolved): the index
    /// of the first protected folder it overlaps, or whose place it cannot
    /// be proven apart from.
    public static func firstOverlap(of folder: OwnedDescriptor, among others: [OwnedDescriptor?]) -> Int? {
        switch firstOverlap(of: [(folder, nil, nil)], among: others) {
        case .overlap(_, let protected)?, .unproven(_, let protected, _)?: protected
        case nil: nil
        }
    }

    /// The same, for chains already walked.
    package static func overlaps(_ mine: [InodeIdentity], _ theirs: [InodeIdentity]) -> Bool {
        mine.contains(theirs[0]) || theirs.contains(mine[0])
    }

    /// Whether `folder` is one of `roots` or lies beneath one.
    public static func isBeneath(_ folder: OwnedDescriptor, anyOf roots: [OwnedDescriptor]) throws(Errno) -> Bool {
        let identities = Set(roots.compactMap { try? $0.status().inodeIdentity })
        return try chain(of: folder).contains { identities.contains($0) }
    }
}

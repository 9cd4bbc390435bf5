@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Where a folder sits, judged by inodes along "..", as Landlock judges it:
/// symlinks, bind mounts and renames change nothing. Only meaningful while
/// the folders are pinned by open descriptors (ext4 reuses inode numbers).
public enum Ancestry {
    /// The identity of the inode `fd` holds and of every folder above it, up to "/".
    package static func chain(of fd: OwnedDescriptor) throws(Errno) -> [InodeIdentity] {
        let status = try fd.status()
        var result = [status.inodeIdentity]
        var current = fd
        if !status.isDirectory {
            // A file has no "..": take the folder the kernel names for it and
            // prove that name still holds this very inode.
            current = try folder(holding: fd, identity: status.inodeIdentity)
            result.append(try current.status().inodeIdentity)
        }
        for _ in 0..<4096 {
            let parent = OwnedDescriptor(taking: try syscallRetrying { csb_open_path(current.rawValue, "..", 0) })
            let identity = try parent.status().inodeIdentity
            if identity == result.last { return result }  // ".." of "/" is "/"
            result.append(identity)
            current = parent
        }
        throw .tooManySymbolicLinkLevels  // a 4,096-deep tree: treat as unresolvable
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
                let parent = OwnedDescriptor(taking: try syscallRetrying { csb_open_path(folder.rawValue, "..", 0) })
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

    /// The folder the kernel names for `file`, opened, once it is proven to
    /// hold this very inode under the last name. On bytes, not `FilePath`:
    /// this runs at every launch.
    package static func folder(holding file: OwnedDescriptor, identity: InodeIdentity) throws(Errno) -> OwnedDescriptor {
        guard let path = FilePath.pathBytes(ofDescriptor: file.rawValue),
              let slash = path.lastIndex(of: UInt8(ascii: "/")), slash + 1 < path.count else {
            throw .noSuchFileOrDirectory  // deleted, or not on a path at all
        }
        let parent = (slash == 0 ? [UInt8(ascii: "/")] : Array(path[..<slash])) + [0]
        let leaf = Array(path[(slash + 1)...]) + [0]
        let folder = OwnedDescriptor(taking: try syscallRetrying {
            parent.withUnsafeBytes { csb_openat2_path(AT_FDCWD, $0.baseAddress!.assumingMemoryBound(to: CChar.self), 0) }
        })
        var entry = stat()
        let found = leaf.withUnsafeBytes { fstatat(folder.rawValue, $0.baseAddress!.assumingMemoryBound(to: CChar.self), &entry, AT_SYMLINK_NOFOLLOW) }
        guard found == 0, entry.inodeIdentity == identity else { throw .noSuchFileOrDirectory }
        return folder
    }

    /// The first of `others` that `folder` is, holds or lies inside, or
    /// whose place could not be proven apart (a walk that fails counts as an
    /// overlap: fail closed); nil when `folder` is apart from all of them.
    /// `folder`'s chain is walked once, each other's once; a nil other is
    /// skipped (absent: nothing there to overlap).
    public static func firstOverlap(of folder: OwnedDescriptor, among others: [OwnedDescriptor?]) -> Int? {
        let mine = try? chain(of: folder)
        for (index, other) in others.enumerated() {
            guard let other else { continue }
            guard let mine, let theirs = try? chain(of: other) else { return index }
            if overlaps(mine, theirs) { return index }
        }
        return nil
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

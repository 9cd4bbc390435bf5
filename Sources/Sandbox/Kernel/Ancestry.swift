@preconcurrency import Glibc
import CSandbox
import SystemPackage

/// Where a folder sits, judged by inodes along "..", as Landlock judges it:
/// symlinks, bind mounts and renames change nothing. Only meaningful while
/// the folders are pinned by open descriptors (ext4 reuses inode numbers).
public enum Ancestry {
    /// The identity of the inode `fd` holds and of every folder above it, up to "/".
    static func chain(of fd: OwnedDescriptor) throws(Errno) -> [InodeIdentity] {
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

    /// Chains of many descriptors, walking each folder above them once:
    /// sixty system paths under /etc cost one walk of /etc, not sixty.
    /// A chain that cannot be walked is nil.
    static func chains(of descriptors: [OwnedDescriptor]) -> [[InodeIdentity]?] {
        let walker = Walker()
        return descriptors.map { walker.chain(of: $0) }
    }

    /// Walks chains, remembering every folder's chain on the way. The memory
    /// is right only while nothing is renamed: fine within one launch's
    /// checks, and for the denial observer, which only predicts.
    final class Walker {
        private var above: [InodeIdentity: [InodeIdentity]] = [:]  // a folder's chain, itself first
        private let limit: Int

        init(limit: Int = 100_000) { self.limit = limit }

        func chain(of fd: OwnedDescriptor) -> [InodeIdentity]? {
            guard let status = try? fd.status() else { return nil }
            if status.isDirectory { return try? walk(fd, status.inodeIdentity) }
            guard let folder = try? Ancestry.folder(holding: fd, identity: status.inodeIdentity),
                  let folderStatus = try? folder.status(),
                  let chain = try? walk(folder, folderStatus.inodeIdentity) else { return nil }
            return [status.inodeIdentity] + chain
        }

        private func walk(_ start: OwnedDescriptor, _ identity: InodeIdentity) throws(Errno) -> [InodeIdentity] {
            if above.count > limit { above.removeAll() }  // bounded memory, whatever the child makes
            var pending: [InodeIdentity] = []
            var current = start
            var currentIdentity = identity
            for _ in 0..<4096 {
                if let known = above[currentIdentity] { return record(pending, known) }
                pending.append(currentIdentity)
                let parent = OwnedDescriptor(taking: try syscallRetrying { csb_open_path(current.rawValue, "..", 0) })
                let parentIdentity = try parent.status().inodeIdentity
                if parentIdentity == currentIdentity { return record(pending, []) }  // "/"
                current = parent
                currentIdentity = parentIdentity
            }
            throw .tooManySymbolicLinkLevels
        }

        private func record(_ pending: [InodeIdentity], _ tail: [InodeIdentity]) -> [InodeIdentity] {
            var chain = tail
            for identity in pending.reversed() {
                chain.insert(identity, at: 0)
                above[identity] = chain
            }
            return chain
        }
    }

    fileprivate static func folder(holding file: OwnedDescriptor, identity: InodeIdentity) throws(Errno) -> OwnedDescriptor {
        guard let path = FilePath.ofDescriptor(file.rawValue), let leaf = path.lastComponent else {
            throw .noSuchFileOrDirectory  // deleted, or not on a path at all
        }
        let folder = OwnedDescriptor(taking: try syscallRetrying {
            path.removingLastComponent().withPlatformString { csb_openat2_path(AT_FDCWD, $0, 0) }
        })
        var entry = stat()
        let found = FilePath(root: nil, [leaf]).withPlatformString { fstatat(folder.rawValue, $0, &entry, AT_SYMLINK_NOFOLLOW) }
        guard found == 0, entry.inodeIdentity == identity else { throw .noSuchFileOrDirectory }
        return folder
    }

    /// Whether `folder` is `other`, holds it, or lies inside it.
    public static func overlaps(_ folder: OwnedDescriptor, _ other: OwnedDescriptor) throws(Errno) -> Bool {
        overlaps(try chain(of: folder), try chain(of: other))
    }

    /// The same, for chains already walked.
    static func overlaps(_ mine: [InodeIdentity], _ theirs: [InodeIdentity]) -> Bool {
        mine.contains(theirs[0]) || theirs.contains(mine[0])
    }

    /// Whether `folder` is one of `roots` or lies beneath one.
    public static func isBeneath(_ folder: OwnedDescriptor, anyOf roots: [OwnedDescriptor]) throws(Errno) -> Bool {
        let identities = Set(roots.compactMap { try? $0.status().inodeIdentity })
        return try chain(of: folder).contains { identities.contains($0) }
    }
}

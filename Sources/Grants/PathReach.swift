@preconcurrency import Glibc
import CSyscalls
import Sandbox
import SystemPackage

/// Where a descriptor lies in the mount tree (`statx` with STATX_MNT_ID).
struct MountFacts: Equatable {
    let mountID: UInt64
    /// nil when the kernel does not say (before Linux 5.8).
    let isMountRoot: Bool?
    let device: UInt64
    let inode: UInt64

    static func of(_ fd: OwnedDescriptor) -> MountFacts? {
        var mountID: UInt64 = 0
        var root: CInt = 0
        var device: UInt64 = 0
        var inode: UInt64 = 0
        guard (try? syscallRetrying({ csb_mount_facts(fd.rawValue, &mountID, &root, &device, &inode) })) != nil else { return nil }
        return MountFacts(mountID: mountID, isMountRoot: root < 0 ? nil : root == 1, device: device, inode: inode)
    }
}

/// A path walked one component at a time from "/", never following a link,
/// as far as it goes: what each folder on it is, and why the walk stopped.
struct PathWalk {
    struct Step {
        let path: FilePath
        let fd: OwnedDescriptor
        let facts: MountFacts
    }

    /// "/" first, then each folder along the path that opened.
    private(set) var steps: [Step] = []
    /// Why the walk stopped short of the end; nil when the whole path opened.
    private(set) var stopped: Errno?
    let path: FilePath

    init(_ path: FilePath) {
        self.path = path
        let slash = UInt8(ascii: "/")
        guard let root = try? OwnedDescriptor.openPath("/", follow: false), let facts = MountFacts.of(root) else {
            stopped = .noSuchFileOrDirectory
            return
        }
        steps.append(Step(path: "/", fd: root, facts: facts))
        var prefix: [UInt8] = []
        for component in path.bytes.split(separator: slash) {
            prefix += [slash] + component
            let next: OwnedDescriptor
            do { next = try OwnedDescriptor.openPath(FilePath(bytes: Array(component)), follow: false, relativeTo: steps.last!.fd) } catch {
                stopped = error
                return
            }
            // A link or a file ends the walk: the bookmark's path held neither.
            guard let st = try? next.status(), st.st_mode & S_IFMT == S_IFDIR, let facts = MountFacts.of(next) else {
                stopped = .notDirectory
                return
            }
            steps.append(Step(path: FilePath(bytes: prefix), fd: next, facts: facts))
        }
    }

    /// Whether the walk reached the end of the path.
    var isComplete: Bool { stopped == nil }
}

/// Why a folder found elsewhere, or the path where it was, does not lead to it.
enum PathReach {
    /// Whether `path` leads to the very folder `folder` holds.
    static func leads(_ path: FilePath, to folder: OwnedDescriptor) -> Bool {
        guard let atPath = try? OwnedDescriptor.openPath(path, follow: false),
              let here = try? atPath.status(), let there = try? folder.status() else { return false }
        return here.st_dev == there.st_dev && here.st_ino == there.st_ino
    }

    /// The mounts `folder` is reached through: its own, and each one its
    /// ".." crosses into on the way to "/".
    static func mountChain(of folder: OwnedDescriptor) -> Set<UInt64> {
        var chain = Set<UInt64>()
        var current = folder
        // A path has at most PATH_MAX / 2 components.
        for _ in 0..<(Int(PATH_MAX) / 2) {
            guard let facts = MountFacts.of(current) else { break }
            chain.insert(facts.mountID)
            guard let parent = try? OwnedDescriptor.openPath("..", follow: false, relativeTo: current),
                  let above = MountFacts.of(parent), above != facts else { break }
            current = parent
        }
        return chain
    }

    /// The first folder on `path` that lies on a mount `folder` is not
    /// reached through: there another filesystem hides the rest of the path.
    static func coveringMount(on path: FilePath, hiding folder: OwnedDescriptor) -> FilePath? {
        let chain = mountChain(of: folder)
        return PathWalk(path).steps.dropFirst().first { !chain.contains($0.facts.mountID) }?.path
    }

    /// Without the folder in hand (no CAP_DAC_READ_SEARCH, or an FID-only
    /// handle): the topmost mount on `path` that may hide it. That is the
    /// path itself, now the root of a mount that is not the folder, or a
    /// folder above it, now the root of another filesystem; in both cases
    /// mounted on a folder of the granted folder's filesystem. A mount that
    /// was there when the folder was granted (the folder's own filesystem,
    /// mounted above it) is not one.
    static func likelyCover(of identity: FolderIdentity, at path: FilePath) -> FilePath? {
        let walk = PathWalk(path)
        for (index, step) in walk.steps.enumerated().dropFirst() where step.facts.isMountRoot == true {
            let isWholePath = walk.isComplete && index == walk.steps.count - 1
            if isWholePath, let here = try? FolderIdentity.of(step.fd, path: step.path), here.isSameFolder(as: identity) { return nil }
            guard let beneath = try? OwnedDescriptor.openPath("..", follow: false, relativeTo: step.fd),
                  identity.mayShareFilesystem(with: beneath) else { continue }
            if isWholePath || !identity.mayShareFilesystem(with: step.fd) { return step.path }
        }
        return nil
    }

    /// The folder on `path` this process may not search, when that is why
    /// the path does not open: with its mode and owner, for the message.
    static func unsearchable(on path: FilePath) -> (folder: FilePath, mode: mode_t, owner: uid_t)? {
        let walk = PathWalk(path)
        guard walk.stopped == .permissionDenied, let last = walk.steps.last, let st = try? last.fd.status() else { return nil }
        return (last.path, st.st_mode & 0o7777, st.st_uid)
    }
}

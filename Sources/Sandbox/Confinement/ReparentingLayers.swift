@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Keeps the writable folders' files apart. Landlock lets a file be renamed
/// or hard-linked into another folder (reparented) when the layer allows
/// REFER on both folders and the file gains no right there. The command's
/// layer gives every writable folder the same rights, so a file of a grant
/// could be linked into the container, where the link would outlive the
/// grant (and the reverse). Separate mounts answer EXDEV only where each
/// folder is a mount of its own, and never for folders nested in one
/// another: these layers hold on any mount.
///
/// One layer per writable folder F: it handles REFER and IOCTL_DEV, allows
/// REFER in every writable folder and IOCTL_DEV in F alone. The command's
/// layer grants IOCTL_DEV nowhere, so these layers take nothing away; but a
/// file moved or linked into F from outside F would gain IOCTL_DEV in F's
/// layer, and Landlock refuses that with EXDEV. A move from X to Y is thus
/// allowed when every writable folder that holds Y also holds X: within one
/// folder, or out of an inner folder into the one around it, never into
/// another folder. IOCTL_DEV because it is the one right Landlock compares
/// for files (MAKE_CHAR and MAKE_BLOCK count for folders only) that the
/// command's layer grants nowhere (EXECUTE it grants in the system paths).
/// One layer per folder, rather than fewer layers with a set of rights per
/// folder: sets would have to stay apart under any union that nesting or a
/// bind mount makes, which one bit per folder does by construction; up to
/// four folders that takes no more layers anyway.
struct ReparentingLayers {
    /// What the command's layer may allow in the writable folders.
    enum Mode: Equatable {
        /// At most one writable folder: nothing to keep apart (the private
        /// /dev/shm is a mount of its own).
        case noLayersNeeded
        /// One layer per writable folder, in `layers`.
        case separated
        /// No REFER in the command's layer, so every rename or link into
        /// another folder is refused, within one writable folder too: the
        /// kernel lacks IOCTL_DEV (Landlock ABI 5) with two writable folders
        /// or more, or there are more than `maximumLayers`, or it has no
        /// REFER at all (ABI 1).
        case refused
    }

    /// Landlock stacks at most 16 layers (the keeper's, these, the
    /// command's, and any the command adds): a bound that leaves room.
    static let maximumLayers = 8

    let mode: Mode
    /// The distinct writable folders (one per inode), in rule order.
    let folders: [(rule: PathRule, identity: InodeIdentity)]
    /// Entered by the child, in order, before the command's own layer.
    let layers: [LandlockRuleset]

    /// Whether the command's layer allows REFER in the writable folders.
    var allowsRefer: Bool { mode != .refused }

    /// `rules`: every rule of the command's layer; the read-write folders among them are kept apart.
    init(abi: Int, rules: [PathRule]) throws(Errno) {
        var distinct: [(rule: PathRule, identity: InodeIdentity)] = []
        for rule in rules where rule.access == .readWrite {
            // What fstat said when the rule was opened, if it was asked (the system paths).
            let inode: Ancestry.Inode
            if let known = rule.inode { inode = known } else { inode = Ancestry.Inode(try rule.exposed.status()) }
            guard inode.isDirectory, !distinct.contains(where: { $0.identity == inode.identity }) else { continue }
            distinct.append((rule, inode.identity))
        }
        folders = distinct
        if abi < 2 {  // ABI 1 has no REFER: it refuses every reparenting by itself
            mode = .refused
            layers = []
        } else if distinct.count < 2 {
            mode = .noLayersNeeded
            layers = []
        } else if abi < 5 || distinct.count > Self.maximumLayers {
            mode = .refused
            layers = []
        } else {
            mode = .separated
            var built: [LandlockRuleset] = []
            for kept in distinct {
                let layer = try LandlockRuleset(files: [.refer, .ioctlDev], network: [], scope: [])
                for folder in distinct {
                    try layer.allow(folder.identity == kept.identity ? [.refer, .ioctlDev] : .refer, beneath: folder.rule.exposed)
                }
                built.append(layer)
            }
            layers = built
        }
    }

    /// One line for `--report`.
    var summary: String {
        switch mode {
        case .noLayersNeeded:
            "renames and hard links: free within the writable folder"
        case .separated:
            "renames and hard links: free within each writable folder, refused (EXDEV) between them "
                + "(\(layers.count) Landlock layers, one per folder)"
        case .refused where folders.count < 2:
            "renames and hard links into another folder: refused (EXDEV) everywhere: Landlock ABI 1 has no right to allow them"
        case .refused where folders.count > Self.maximumLayers:
            "renames and hard links into another folder: refused (EXDEV) everywhere, within a writable folder too: "
                + "more than \(Self.maximumLayers) writable folders (mv copies instead)"
        case .refused:
            "renames and hard links into another folder: refused (EXDEV) everywhere, within a writable folder too: "
                + "this kernel's Landlock cannot keep writable folders apart (needs ABI 5; mv copies instead)"
        }
    }

    /// Whether these layers let a file move from a place held by the
    /// writable folders `source` to one held by `destination` (identities
    /// from the folders' chains): what the kernel will answer, for `--explain`.
    static func allows(from source: Set<InodeIdentity>, to destination: Set<InodeIdentity>) -> Bool {
        destination.isSubset(of: source)
    }
}

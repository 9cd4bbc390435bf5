@preconcurrency import Glibc
import CLaunch
import CSyscalls
import SystemPackage
import Synchronization

/// Which file-system tree the command sees.
public enum FileSystemView: String, Sendable, CaseIterable {
    /// A new root that holds only the container, the grants, the policy's
    /// system paths (each at its host path, read-only, read-execute or
    /// writable as granted), the launcher's own files, a /dev of a few device
    /// nodes and ptys of its own, a private /tmp and /dev/shm, and the
    /// sandbox's /proc; nothing else exists (ENOENT). Without a network
    /// entitlement the command also gets a network namespace of its own.
    case `private`
    /// The host's tree: what the rules allow can be used, everything else is
    /// refused by Landlock but still exists (`stat` answers).
    case host
}

/// The private view's network namespace, made ahead on a thread of the
/// launcher (`csb_network_ahead_start`): the kernel's few hundred
/// microseconds of making it overlap the launch's planning. Taken once, by
/// the first keeper planned: no two sandboxes share a network namespace.
final class NetworkNamespaceAhead: Sendable {
    private let pending: Mutex<OpaquePointer?>

    /// Nil where it cannot be made ahead (not root, no thread): the keeper makes its own.
    init?() {
        guard let started = csb_network_ahead_start() else { return nil }
        pending = Mutex(started)
    }

    /// The namespace, once; nil afterwards or when the kernel refused it
    /// here (the keeper then clones into a new one, as without).
    func take() -> OwnedDescriptor? {
        guard let started = pending.withLock({ pending in defer { pending = nil }; return pending }) else { return nil }
        let fd = csb_network_ahead_finish(started)
        return fd >= 0 ? OwnedDescriptor(taking: fd) : nil
    }

    deinit {
        _ = take()
    }
}

/// The private view, planned in the launcher: the steps the keeper takes in
/// its new mount namespace to build the root (see `csb_view_step`), and the
/// paths reached through a link that it checks once the root is final.
///
/// Every entry is placed at its kernel name (the host path its descriptor
/// holds, no link on the way), so absolute paths mean the same inside and
/// out; a path named through links (`/bin`, `/etc/localtime`, a grant under
/// a linked home) gets those links, with the host's text. An entry inside
/// another one is bound again only when it needs other mount flags
/// (writable inside read-only); otherwise it is only checked to be there.
/// Files are bound one by one, so a file the host replaces atomically keeps
/// the inode it had at launch; a policy that lists the file's folder gets
/// the folder (and what replaces the file).
///
/// A staged grant's place shows its clone instead, bound from where the
/// clone lies (in the broker's state, which the view never holds), always
/// as a mount of its own. Nothing else may share or lie inside that place:
/// it would stand for the folder, which the command does not see there.
struct ViewPlan {
    struct Step {
        let kind: csb_view_step_kind
        let target: [UInt8]
        var source: [UInt8]? = nil
        var identity: InodeIdentity? = nil
        /// A NESTED bind: what is at `target` in the bind around it (the
        /// host's inode there; a staged grant's `identity` is its clone's).
        var targetIdentity: InodeIdentity? = nil
        var flags: UInt32 = 0
        /// BIND of a mount of its own for grants only: their names (the
        /// keeper sends the mount, which is detached once all are revoked).
        var grants: [String] = []
    }

    struct Check {
        let path: [UInt8]
        let identity: InodeIdentity
    }

    private(set) var steps: [Step] = []
    private(set) var checks: [Check] = []
    /// The minimal /dev's nodes, opened here: open until the keeper has bound them.
    private(set) var devices: [OwnedDescriptor] = []

    /// Names of the keeper's own in /dev (and /dev itself): a system path
    /// there is the sandbox's own in the view, never the host's.
    static let ownDevNames: [[UInt8]] = ["pts", "shm", "ptmx", "fd", "stdin", "stdout", "stderr"].map { Array($0.utf8) }

    /// The device nodes every view has (major, minor), bound from the host's /dev.
    static let devices: [(name: String, major: UInt32, minor: UInt32)] = [
        ("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0),
    ]

    /// One thing to place: a rule's descriptor, at its kernel name.
    private struct Entry {
        let components: [[UInt8]]
        /// What the view shows there: the host's inode, or a staged grant's clone.
        let identity: InodeIdentity
        /// The host's inode at `components`: `identity` but for a staged grant.
        let hostIdentity: InodeIdentity
        /// A staged grant's clone, by its kernel name: bound from there.
        let source: [UInt8]?
        /// For messages: the first rule placed here.
        let shown: String
        let isDirectory: Bool
        let isDevice: Bool
        var writable: Bool
        var optional: Bool
        /// The grants (by name) placed here, and whether anything else is.
        var grants: [String]
        var others: Bool
    }

    /// Why the view cannot hold what the launch needs (the launch stops, or falls back under best effort).
    struct Unavailable: Error {
        let reason: String
    }

    init(rules: [PathRule]) throws(Unavailable) {
        var entries: [Entry] = []
        var givenPaths: [(path: [UInt8], real: [[UInt8]], identity: InodeIdentity, optional: Bool)] = []
        // The files of one folder (most of a policy's /etc) share its descriptor: its name is found once.
        var folderNames: [(folder: ObjectIdentifier, name: [UInt8]?)] = []
        func name(of descriptor: OwnedDescriptor, status: stat, given: [UInt8]?, folder: OwnedDescriptor?) -> [UInt8]? {
            // A file opened by its last name in `folder`, not following a link
            // there: its kernel name is the folder's and that name.
            if let folder, let given, let slash = given.lastIndex(of: UInt8(ascii: "/")), status.st_mode & S_IFMT != S_IFLNK {
                let leaf = given[(slash + 1)...]
                if !leaf.isEmpty, !leaf.elementsEqual([UInt8(ascii: ".")]), !leaf.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                    let key = ObjectIdentifier(folder)
                    let folderName: [UInt8]?
                    if let known = folderNames.first(where: { $0.folder == key }) {
                        folderName = known.name
                    } else {
                        folderName = (try? folder.status()).flatMap { Self.kernelName(of: folder, identity: $0.inodeIdentity, given: Array(given[..<slash])) }
                        folderNames.append((key, folderName))
                    }
                    if let folderName { return (folderName == [UInt8(ascii: "/")] ? [] : folderName) + [UInt8(ascii: "/")] + leaf }
                }
            }
            return Self.kernelName(of: descriptor, identity: status.inodeIdentity, given: given)
        }
        func add(_ descriptor: OwnedDescriptor, given: [UInt8]?, folder: OwnedDescriptor? = nil, staged: OwnedDescriptor? = nil, writable: Bool,
                 optional: Bool, grant: String? = nil, shown: @autoclosure () -> String) throws(Unavailable) {
            guard let status = try? descriptor.status(), let real = name(of: descriptor, status: status, given: given, folder: folder),
                  let components = Self.components(real) else {
                if optional { return }
                throw Unavailable(reason: "\(shown()) has no path the view could hold it at (deleted, or not reachable from /)")
            }
            // A staged grant: the clone, found by its kernel name (no link on the way), shown in the folder's place.
            var source: [UInt8]?
            var shownStatus = status
            if let staged {
                guard let cloneStatus = try? staged.status(), cloneStatus.isDirectory, let cloneName = FilePath.pathBytes(ofDescriptor: staged.rawValue),
                      Self.components(cloneName) != nil else {
                    throw Unavailable(reason: "the clone of \(shown()) has no path the view could bind it from (deleted, or not reachable from /)")
                }
                source = cloneName
                shownStatus = cloneStatus
            }
            let kind = status.st_mode & S_IFMT
            let entry = Entry(
                components: components, identity: shownStatus.inodeIdentity, hostIdentity: status.inodeIdentity, source: source, shown: shown(),
                isDirectory: kind == S_IFDIR, isDevice: kind == S_IFCHR || kind == S_IFBLK, writable: writable && kind != S_IFCHR && kind != S_IFBLK,
                optional: optional, grants: grant.map { [$0] } ?? [], others: grant == nil)
            if let index = entries.firstIndex(where: { $0.components == components }) {
                if entries[index].source != nil || source != nil {
                    // The same place as a staged grant: it would stand for the folder, the clone is shown there.
                    guard entries[index].source == source, entries[index].identity == entry.identity else {
                        let (stagedOne, other) = source != nil ? (entry.shown, entries[index].shown) : (entries[index].shown, entry.shown)
                        throw Unavailable(reason: "\(other) is the folder of \(stagedOne), whose place shows its clone: "
                            + "stage every grant of a folder, or none")
                    }
                }
                guard entries[index].identity == entry.identity else {
                    throw Unavailable(reason: "\(Printable.path(bytes: real)) changed while the launch was checking it")
                }
                entries[index].writable = entries[index].writable || entry.writable
                entries[index].optional = entries[index].optional && entry.optional
                entries[index].grants += entry.grants
                entries[index].others = entries[index].others || entry.others
            } else {
                entries.append(entry)
            }
            if let given, given != real { givenPaths.append((given, components, entry.identity, optional)) }
        }
        for rule in rules {
            var grant: String?
            if case .grant(let name) = rule.origin { grant = name }
            try add(rule.descriptor, given: rule.path.bytes, folder: rule.folder, staged: rule.staged, writable: rule.access == .readWrite,
                    optional: rule.origin == .launcher, grant: grant, shown: rule.shownName)
        }
        // The minimal /dev: the host's nodes, each checked to be the device it names.
        for device in Self.devices {
            guard let fd = try? OwnedDescriptor.openPath(FilePath("/dev/" + device.name), follow: false),
                  let status = try? fd.status(), status.st_mode & S_IFMT == S_IFCHR,
                  csb_device_major(UInt64(status.st_rdev)) == device.major,
                  UInt32(truncatingIfNeeded: (status.st_rdev & 0xFF) | ((status.st_rdev >> 12) & 0xFFF0_0000)) == device.minor else { continue }
            devices.append(fd)
            try add(fd, given: Array(("/dev/" + device.name).utf8), writable: false, optional: false, shown: "/dev/" + device.name)
        }
        try place(entries.filter { Self.belongsInView($0.components) }.sorted { Self.precedes($0.components, $1.components) })
        for (given, real, identity, optional) in givenPaths {
            try linkPath(given, real: real, identity: identity, optional: optional)
        }
    }

    /// The path the view places `descriptor` at: `given` itself when it
    /// leads to the same inode with no link anywhere on the way (a path the
    /// kernel would also name so), else the kernel's name for the descriptor.
    /// The first is an openat2 and an fstat; a readlink of /proc/self/fd/N
    /// makes procfs build an inode for N and costs three times as much, and
    /// a launch places some sixty entries. Either way the keeper binds only
    /// the inode found at that path that is this one (device and inode compared).
    private static func kernelName(of descriptor: OwnedDescriptor, identity: InodeIdentity, given: [UInt8]?) -> [UInt8]? {
        if let given, isPlain(given) {
            let fd = try? syscallRetrying {
                (given + [0]).withUnsafeBytes { csb_openat2_path_no_links(AT_FDCWD, $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
            }
            if let fd {
                let found = OwnedDescriptor(taking: fd)
                if let status = try? found.status(), status.inodeIdentity == identity { return given }
            }
        }
        return FilePath.pathBytes(ofDescriptor: descriptor.rawValue)
    }

    /// An absolute path of names only: no empty name, ".", ".." or trailing "/".
    private static func isPlain(_ path: [UInt8]) -> Bool {
        guard path.count > 1, path.first == UInt8(ascii: "/"), path.last != UInt8(ascii: "/") else { return false }
        return !path.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).contains { name in
            name.isEmpty || name.elementsEqual([UInt8(ascii: ".")]) || name.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")])
        }
    }

    /// Paths as their names, or nil for a path that is not absolute.
    private static func components(_ path: [UInt8]) -> [[UInt8]]? {
        guard path.first == UInt8(ascii: "/") else { return nil }
        return path.split(separator: UInt8(ascii: "/")).map(Array.init)
    }

    private static func joined(_ components: ArraySlice<[UInt8]>) -> [UInt8] {
        Array(components.joined(separator: [UInt8(ascii: "/")]))
    }

    /// Parents first: by name, component by component.
    private static func precedes(_ a: [[UInt8]], _ b: [[UInt8]]) -> Bool {
        for (x, y) in zip(a, b) where x != y { return x.lexicographicallyPrecedes(y) }
        return a.count < b.count
    }

    private static let proc = Array("proc".utf8), dev = Array("dev".utf8), tmp = Array("tmp".utf8)

    /// What the view holds of the host's: not / itself, nothing beneath the
    /// sandbox's own /proc, and of /dev only what is not the keeper's.
    private static func belongsInView(_ components: [[UInt8]]) -> Bool {
        guard let first = components.first else { return false }
        if first == proc { return false }
        if first == dev { return components.count >= 2 && !ownDevNames.contains(components[1]) }
        return true
    }

    /// The folders of the view that are the keeper's own tmpfs, made before the steps.
    private static func isKeepersFolder(_ components: ArraySlice<[UInt8]>) -> Bool {
        components.count == 1 && (components.first == proc || components.first == dev || components.first == tmp)
    }

    /// Entries placed so far: whether each is bound (and how), by its names.
    private var placed: [(components: [[UInt8]], writable: Bool, isDirectory: Bool, staged: String?)] = []
    /// Folders of the keeper's tmpfs made by a step, by their names.
    private var folders: Set<[UInt8]> = []
    private var binds: [Step] = []

    /// The bind that holds `components` (or is it), if any.
    private func enclosingBind(_ components: [[UInt8]]) -> (writable: Bool, isDirectory: Bool, equal: Bool)? {
        var best: (writable: Bool, isDirectory: Bool, equal: Bool, depth: Int)?
        for bound in placed where bound.components.count <= components.count && components.starts(with: bound.components) {
            guard bound.components.count == components.count || bound.isDirectory else { continue }
            if best == nil || bound.components.count > best!.depth {
                best = (bound.writable, bound.isDirectory, bound.components.count == components.count, bound.components.count)
            }
        }
        return best.map { ($0.writable, $0.isDirectory, $0.equal) }
    }

    /// A file of the launcher's making on the keeper's own tmpfs, read-only
    /// like the rest of it: `path` is relative ("etc/resolv.conf"), its
    /// `content` text (no NUL). Nothing the policy binds may be there.
    mutating func addFile(_ path: String, content: String) throws(Unavailable) {
        let target = Array(path.utf8)
        guard let components = Self.components([UInt8(ascii: "/")] + target), !content.utf8.contains(0) else {
            throw Unavailable(reason: "/\(path) cannot be made in the view")
        }
        guard enclosingBind(components) == nil, !folders.contains(target) else {
            throw Unavailable(reason: "/\(path) is the sandbox's own with an allowed-hosts list, but the policy binds the host's there: "
                + "list the files of its folder one by one")
        }
        let before = steps.count
        makeParents(components)
        let parents = Array(steps[before...])
        steps.removeSubrange(before...)
        folders.insert(target)
        steps.insert(contentsOf: parents + [Step(kind: CSB_VIEW_FILE, target: target, source: Array(content.utf8))], at: firstBind)
    }

    /// The staged grant (as shown) whose place holds `components`, if any: there the view shows its clone.
    private func enclosingStagedGrant(_ components: [[UInt8]]) -> String? {
        placed.first { $0.staged != nil && $0.components.count < components.count && components.starts(with: $0.components) }?.staged
    }

    /// Makes the keeper's folders down to (not including) the last of `components`.
    private mutating func makeParents(_ components: [[UInt8]]) {
        for end in 1..<max(components.count, 1) {
            let prefix = components[..<end]
            if Self.isKeepersFolder(prefix) { continue }
            let path = Self.joined(prefix)
            if folders.insert(path).inserted { steps.append(Step(kind: CSB_VIEW_DIRECTORY, target: path)) }
        }
    }

    private mutating func place(_ entries: [Entry]) throws(Unavailable) {
        for entry in entries {
            let target = Self.joined(entry.components[...])
            var flags: UInt32 = entry.isDirectory ? UInt32(CSB_VIEW_RECURSIVE.rawValue) : 0
            if entry.writable { flags |= UInt32(CSB_VIEW_WRITABLE.rawValue) }
            if entry.isDevice { flags |= UInt32(CSB_VIEW_DEVICE.rawValue) }
            if entry.optional { flags |= UInt32(CSB_VIEW_OPTIONAL.rawValue) }
            var effectiveWritable = entry.writable
            if let staged = enclosingStagedGrant(entry.components) {
                // Inside a clone: the path names the clone's copy, not what
                // this rule stands for. The launcher's own files are left as found.
                if entry.optional { continue }
                throw Unavailable(reason: "\(entry.shown) lies inside the folder of \(staged), whose place shows its clone: "
                    + "grant folders apart, or stage the outer one alone")
            }
            if let outer = enclosingBind(entry.components) {
                // Inside another bind: there already, with that bind's flags.
                // Bound again only to be writable (or a device) where the
                // outer one is not, or to show a staged grant's clone; the
                // launcher's own files are left as found.
                if entry.optional { continue }
                if entry.writable && !outer.writable || entry.isDevice || entry.source != nil {
                    binds.append(Self.bind(target, entry, flags: flags | UInt32(CSB_VIEW_NESTED.rawValue)))
                } else {
                    binds.append(Step(kind: CSB_VIEW_CHECK, target: target, identity: entry.identity))
                    effectiveWritable = outer.writable
                }
            } else {
                makeParents(entry.components)
                if !Self.isKeepersFolder(entry.components[...]) {
                    guard folders.insert(target).inserted else {
                        throw Unavailable(reason: "/\(Printable.path(bytes: target)) is planned twice")
                    }
                    steps.append(Step(kind: entry.isDirectory ? CSB_VIEW_DIRECTORY : CSB_VIEW_FILE, target: target))
                }
                binds.append(Self.bind(target, entry, flags: flags))
            }
            placed.append((entry.components, effectiveWritable, entry.isDirectory, entry.source != nil ? entry.shown : nil))
        }
        // Every folder, file and link of the keeper's tmpfs first, then the
        // binds, parents first: nothing is ever made inside a bind.
        steps += binds
        binds = []
    }

    /// A bind of `entry`; revocable (its mount goes to the launcher) when
    /// it holds grants and nothing else: a grant inside another bind with
    /// the same flags (a CHECK) shares that bind's mount and is not.
    private static func bind(_ target: [UInt8], _ entry: Entry, flags: UInt32) -> Step {
        let revocable = !entry.grants.isEmpty && !entry.others
        return Step(kind: CSB_VIEW_BIND, target: target, source: entry.source ?? [UInt8(ascii: "/")] + target, identity: entry.identity,
                    targetIdentity: entry.hostIdentity, flags: flags | (revocable ? UInt32(CSB_VIEW_REVOCABLE.rawValue) : 0),
                    grants: revocable ? entry.grants : [])
    }

    /// The grants each revocable bind holds, by the index of its step.
    var revocableBinds: [(step: Int, grants: [String])] {
        steps.enumerated().compactMap { index, step in step.grants.isEmpty ? nil : (index, step.grants) }
    }

    /// Recreates the links on the way along `given` (which the kernel
    /// followed to the entry), with the host's text, and checks at the end
    /// that following `given` in the view leads to the entry. A name that
    /// leads elsewhere now (renamed or replaced since it was opened) stops
    /// the launch: the command would be told a path that is not its folder
    /// (the launcher's own optional files are only left out).
    private mutating func linkPath(_ given: [UInt8], real: [[UInt8]], identity: InodeIdentity, optional: Bool) throws(Unavailable) {
        guard let walked = Self.walk(given), walked.resolved == real else {
            if optional { return }
            // Renamed or replaced since it was opened: the command would find
            // something else, or nothing, at the path it is told.
            throw Unavailable(reason: "\(Printable.path(bytes: given)) no longer leads to the folder that was checked (renamed or replaced during the launch)")
        }
        guard !walked.links.isEmpty else { return }
        for folder in walked.folders where enclosingBind(folder) == nil && !folder.isEmpty && !Self.isKeepersFolder(folder[...]) {
            makeParents(folder)
            let path = Self.joined(folder[...])
            if folders.insert(path).inserted { steps.insert(Step(kind: CSB_VIEW_DIRECTORY, target: path), at: firstBind) }
        }
        for link in walked.links where enclosingBind(link.at) == nil && Self.belongsInView(link.at) {
            let path = Self.joined(link.at[...])
            guard folders.insert(path).inserted else { continue }
            // The link's folders were made above (the walk went through them).
            steps.insert(Step(kind: CSB_VIEW_LINK, target: path, source: link.text), at: firstBind)
        }
        checks.append(Check(path: given, identity: identity))
    }

    private var firstBind: Int {
        steps.firstIndex { $0.kind == CSB_VIEW_BIND || $0.kind == CSB_VIEW_CHECK } ?? steps.count
    }

    /// Follows `path` from "/" as the kernel does (lstat and readlink, at
    /// most 40 links): every link met (where, and its text) and every folder
    /// gone through, or nil when it does not resolve.
    static func walk(_ path: [UInt8]) -> (links: [(at: [[UInt8]], text: [UInt8])], folders: [[[UInt8]]], resolved: [[UInt8]])? {
        guard var pending = components(path)?.reversed().map({ $0 }) else { return nil }
        var current: [[UInt8]] = []
        var links: [(at: [[UInt8]], text: [UInt8])] = []
        var visited: [[[UInt8]]] = [[]]
        while let name = pending.popLast() {
            if name == [UInt8(ascii: ".")] { continue }
            if name == [UInt8(ascii: "."), UInt8(ascii: ".")] {
                if !current.isEmpty { current.removeLast() }
                continue
            }
            let candidate = current + [name]
            var status = stat()
            let path = [UInt8(ascii: "/")] + joined(candidate[...]) + [0]
            guard path.withUnsafeBufferPointer({ lstat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &status) }) == 0 else { return nil }
            if status.isSymlink {
                guard links.count < 40, let text = linkText(path) else { return nil }
                links.append((candidate, text))
                if text.first == UInt8(ascii: "/") { current = [] }
                pending += text.split(separator: UInt8(ascii: "/")).map(Array.init).reversed()
            } else {
                current = candidate
            }
            if !pending.isEmpty, !visited.contains(current) { visited.append(current) }
        }
        return (links, visited, current)
    }

    private static func linkText(_ path: [UInt8]) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = path.withUnsafeBufferPointer { name in
            buffer.withUnsafeMutableBytes { readlink(UnsafeRawPointer(name.baseAddress!).assumingMemoryBound(to: CChar.self), $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX)) }
        }
        guard length > 0 else { return nil }
        return Array(buffer[0..<length])
    }

    /// Fills the keeper's plan with the steps and checks (their memory in `image`).
    func apply(to keeper: inout csb_keeper_plan, image: LaunchImage) {
        let cSteps = steps.map { step in
            csb_view_step(
                kind: CInt(step.kind.rawValue), target: image.string(step.target), source: step.source.map { image.string($0) },
                device: step.identity?.device ?? 0, inode: step.identity?.inode ?? 0, flags: step.flags,
                target_device: step.targetIdentity?.device ?? 0, target_inode: step.targetIdentity?.inode ?? 0)
        }
        keeper.view_steps = image.array(cSteps)
        keeper.view_steps_count = CInt(cSteps.count)
        let cChecks = checks.map { check in
            csb_view_check(path: image.string(check.path), device: check.identity.device, inode: check.identity.inode)
        }
        keeper.view_checks = image.array(cChecks)
        keeper.view_checks_count = CInt(cChecks.count)
    }

    /// For a failure the keeper reported (`CSB_KEEPER_VIEW`'s value): what it was building.
    func describe(failure: CInt) -> String {
        if failure >= 0, Int(failure) < steps.count {
            let step = steps[Int(failure)]
            let place = "/" + Printable.path(bytes: step.target)
            switch step.kind {
            case CSB_VIEW_BIND: return "binding \(place) into the view"
            case CSB_VIEW_CHECK: return "finding \(place) inside the view"
            case CSB_VIEW_LINK: return "making the link \(place)"
            default: return "making \(place)"
            }
        }
        switch Int32(failure) {
        case CSB_VIEW_FAILED_NETWORK.rawValue: return "bringing up the loopback interface of its network namespace"
        case CSB_VIEW_FAILED_ROOT.rawValue: return "mounting the new root (tmpfs)"
        case CSB_VIEW_FAILED_DEV.rawValue: return "mounting /dev, its devpts or /dev/shm"
        case CSB_VIEW_FAILED_TMP.rawValue: return "mounting /tmp"
        case CSB_VIEW_FAILED_PIVOT.rawValue: return "entering the new root (pivot_root) and detaching the host's"
        case CSB_VIEW_FAILED_PROC.rawValue: return "mounting /proc"
        case CSB_VIEW_FAILED_READ_ONLY.rawValue: return "making the new root and /dev read-only"
        case CSB_VIEW_FAILED_RULES.rawValue: return "adding Landlock rules for /tmp and the terminals"
        case CSB_VIEW_FAILED_PTY.rawValue: return "opening the command's pty in its own devpts"
        case CSB_VIEW_FAILED_GRANT_AREA.rawValue: return "making the live grants' area, its namespace or its helper"
        case CSB_VIEW_FAILED_CHECK.rawValue: return "checking a path reached through a link (the host changed it during the launch)"
        default: return "step \(failure)"
        }
    }
}

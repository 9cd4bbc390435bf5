@preconcurrency import Glibc
import CSyscalls
import CSeccomp
import Synchronization
import SystemPackage

/// How many connects wait on threads of their own; beyond the limit the
/// command gets EAGAIN, so it cannot make the launcher start threads without end.
final class WaitingConnects: Sendable {
    /// Unix sockets: a few at once.
    static let limit = 16
    /// TCP to the network proxy on the sandbox's loopback (an allowed-hosts
    /// list): parallel downloaders open dozens at once, and a blocking
    /// connect never answers EAGAIN; as many as the proxy takes connections.
    static let internetLimit = 256
    let limit: Int
    private let count = Atomic<Int>(0)

    init(limit: Int = WaitingConnects.limit) {
        self.limit = limit
    }

    func enter() -> Bool {
        if count.add(1, ordering: .relaxed).newValue <= limit { return true }
        count.subtract(1, ordering: .relaxed)
        return false
    }

    func leave() { count.subtract(1, ordering: .relaxed) }
}

/// One supervised `connect`: the copy of the command's socket, the checked
/// address, and the descriptor that keeps the checked socket inode named.
final class ConnectJob: @unchecked Sendable {
    let socket: OwnedDescriptor
    let address: [UInt8]
    let keeping: OwnedDescriptor?
    private var answer: (id: UInt64, listener: OwnedDescriptor, done: () -> Void)?

    init(socket: OwnedDescriptor, address: [UInt8], keeping: OwnedDescriptor?) {
        self.socket = socket
        self.address = address
        self.keeping = keeping
    }

    /// 0, or the errno.
    func connect() -> Int32 {
        let result = address.withUnsafeBytes { bytes in
            Glibc.connect(socket.rawValue, bytes.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(bytes.count))
        }
        return result == 0 ? 0 : errno
    }

    /// Connects on a detached thread (with no effective capabilities, as
    /// the child) and answers request `id` on `listener`; false when no
    /// thread could be made.
    func startThread(answering id: UInt64, on listener: OwnedDescriptor, done: @escaping () -> Void) -> Bool {
        answer = (id, listener, done)
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        defer { pthread_attr_destroy(&attributes) }
        let created = pthread_create(&thread, &attributes, { raw in
            let job = Unmanaged<ConnectJob>.fromOpaque(raw!).takeRetainedValue()
            job.run()
            return nil
        }, box)
        if created != 0 { Unmanaged<ConnectJob>.fromOpaque(box).release() }
        return created == 0
    }

    private func run() {
        guard let answer else { return }
        var response = csb_seccomp_notif_resp()
        response.id = answer.id
        if let saved = try? SavedCapabilities.clearingEffective() {
            let result = connect()
            saved.restore()
            response.error = -result
        } else {
            response.error = -EPERM
        }
        _ = csb_seccomp_notify_respond(answer.listener.rawValue, &response)
        answer.done()
    }
}

/// Landlock does not mediate chmod, chown, utimes, xattrs or inotify
/// watches, so the filter sends them here (seccomp user notification). The
/// supervisor resolves the target as the child would, with the child's
/// powers (effective capabilities cleared on this thread), allows changes
/// only beneath a writable folder and reads only beneath a readable one, and
/// performs the call itself. It never answers "continue": the kernel would
/// re-read the child's memory after our check, a race the child could win.
/// Every argument comes from a hostile process: a value out of range is an
/// errno for the child, never a trap in the launcher.
final class MetadataSupervisor {
    /// The identities of the folders where metadata may change, and of
    /// everything the sandbox may read; their fds stay open, so the inode
    /// numbers cannot be reused meanwhile.
    private var writable: Set<InodeIdentity>
    private var readable: Set<InodeIdentity>
    private var pinned: [OwnedDescriptor]

    /// Resolves the child's paths as its kernel calls did (in its namespace,
    /// from its root), shared with the denial observer.
    let paths: CommandPaths
    /// The serving thread's capabilities (see `CallerPowers`), shared with the observer.
    let powers = CallerPowers()

    /// Watches the command placed, recorded while folders may be taken
    /// away from it (`recordWatches`): its inotify instances (copies, one
    /// per instance) and each watch's descriptor and the mount roots on its
    /// way up to the view's root, so that `forgetWatches` removes those in
    /// a folder taken away. inotify_rm_watch through our copy removes the
    /// command's own watch: the instance is one open file.
    var recordWatches = false
    private var instances: [OwnedDescriptor] = []
    private var watches: [(instance: Int, descriptor: Int32, roots: [InodeIdentity])] = []
    /// Folders taken away while the command runs: no watch is made beneath them.
    private var takenAway: Set<InodeIdentity> = []
    /// Bounds what the command can make the launcher hold; a watch beyond is refused (ENOSPC, as the kernel's own limit).
    static let maximumRecordedWatches = 1 << 16, maximumInstances = 256

    init(writableRoots: [OwnedDescriptor], readableRoots: [OwnedDescriptor], paths: CommandPaths = CommandPaths()) {
        self.paths = paths
        pinned = writableRoots + readableRoots
        ruleDevices = Set(pinned.compactMap { try? UInt64($0.status().st_dev) })
        writable = Set(writableRoots.compactMap { try? $0.status().inodeIdentity })
        readable = Set(readableRoots.compactMap { try? $0.status().inodeIdentity })
    }

    /// Called once the keeper has made the command's mounts: paths are
    /// resolved in its namespace from then on (`shadowed`: the launcher's
    /// mounts the command has its own in place of), and its private
    /// /dev/shm and /tmp (among `own`) are as writable as the command's
    /// layer makes them (its /proc stays refused).
    func enterNamespace(of keeper: pid_t, shadowed: [String], own: [String]) {
        paths.enterNamespace(of: keeper, privateMounts: shadowed)
        for mount in own where mount != "/proc" {
            guard let found = try? paths.resolve(.path(base: nil, Array(mount.utf8CString), follow: false), caller: 0) else { continue }
            // A grant or system path bound over the sandbox's own mount (a
            // grant of the host's /tmp) is the host's, never the sandbox's.
            guard !ruleDevices.contains(UInt64(found.status.st_dev)) else { continue }
            pinned.append(found.target)
            writable.insert(found.status.inodeIdentity)
            readable.insert(found.status.inodeIdentity)
            ownDevices.insert(UInt64(found.status.st_dev))
        }
        var status = stat()
        if stat("/proc/\(keeper)/ns/net", &status) == 0 { network = status.inodeIdentity }
    }

    /// The devices of every folder the rules name: none of them is the sandbox's own.
    private let ruleDevices: Set<UInt64>
    /// The sandbox's network namespace (the keeper's), once it is known.
    private var network: InodeIdentity?
    /// Connects that may block, each on a thread of its own, answered from there.
    private let waitingConnects = WaitingConnects()
    private let waitingInternetConnects = WaitingConnects(limit: WaitingConnects.internetLimit)

    /// The devices of the sandbox's own writable mounts (its /tmp and
    /// /dev/shm, tmpfs no host process has a path to): the only places a
    /// pathname socket is connected to.
    private var ownDevices: Set<UInt64> = []

    /// An allowed-hosts list: IPv4 and IPv6 sockets of the sandbox's own
    /// network namespace (loopback only, where the proxy listens) are
    /// connected as asked; the namespace is what bounds them.
    var connectsInternetInOwnNetwork = false

    /// `connect(fd, address, length)` from a command that may make AF_UNIX
    /// sockets (the private view's network namespace): performed here on a
    /// copy of its socket, never continued. An abstract name is looked up in
    /// the socket's network namespace, the sandbox's own; a pathname only
    /// where it resolves, as the command's own call would, to a socket on
    /// one of the sandbox's own mounts, and then through that very inode, so
    /// a name changed after the check reaches nothing else. A host process
    /// may listen in a grant or the container, which Landlock does not
    /// mediate before ABI 9: those are refused (EACCES).
    private func connect(_ request: csb_seccomp_notif, listener: OwnedDescriptor) throws(Errno) -> Int64? {
        let caller = pid_t(truncatingIfNeeded: request.pid)
        let args = Arguments(request.data.args)
        let fd = Int32(truncatingIfNeeded: args[0])
        let length = args[2]
        let addressSize = UInt64(MemoryLayout<sockaddr_un>.size)
        guard length >= 2, length <= addressSize else { throw .invalidArgument }
        let (address, socket) = try powers.withOurs { () throws(Errno) -> ([UInt8], OwnedDescriptor) in
            let address = try ChildMemory(pid: caller).bytes(at: args[1], count: Int(length))
            let copy = csb_copy_fd_of_thread(caller, fd)
            guard copy >= 0 else { throw Errno(rawValue: errno) == .noSuchFileOrDirectory ? .noSuchProcess : .badFileDescriptor }
            return (address, OwnedDescriptor(taking: copy))
        }
        guard csb_seccomp_notify_id_valid(listener.rawValue, request.id) == 0 else { throw .noSuchProcess }
        var status = try socket.status()
        guard status.st_mode & S_IFMT == S_IFSOCK else { throw .notSocket }
        var domain: CInt = 0
        var domainLength = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(socket.rawValue, SOL_SOCKET, SO_DOMAIN, &domain, &domainLength) == 0 else { throw Errno(rawValue: errno) }
        let internet = domain == AF_INET || domain == AF_INET6
        guard domain == AF_UNIX || internet && connectsInternetInOwnNetwork else { throw .permissionDenied }
        // A socket handed in from the host was made in the host's network
        // namespace, where an abstract name is the host's: only the
        // sandbox's own sockets are connected.
        let namespace = try powers.withOurs { () throws(Errno) -> OwnedDescriptor in
            let fd = csb_socket_network_namespace(socket.rawValue)
            guard fd >= 0 else { throw Errno(rawValue: errno) }
            return OwnedDescriptor(taking: fd)
        }
        guard let network, (try? namespace.status().inodeIdentity) == network else {
            reporter?.record(Denial(
                operation: .network, layer: .supervisor, syscall: "connect", path: nil,
                reason: "a unix socket made outside the sandbox (handed in), which would reach the host's abstract names", errno: EACCES))
            throw .permissionDenied
        }
        if internet {
            // In the sandbox's namespace: its own loopback, nothing beyond.
            return try connecting(
                ConnectJob(socket: socket, address: address, keeping: nil), request: request, listener: listener, waiting: waitingInternetConnects)
        }
        let family = UInt16(address[0]) | UInt16(address[1]) << 8
        let path = address.dropFirst(2)
        guard family == UInt16(AF_UNIX), let first = path.first, first != 0 else {
            // Not a pathname: the kernel's own answer, in the socket's namespace.
            return try connecting(ConnectJob(socket: socket, address: address, keeping: nil), request: request, listener: listener)
        }
        let name = Array(path.prefix { $0 != 0 })
        let found = try powers.asChild { () throws(Errno) -> OwnedDescriptor in
            let start = try paths.start(path: name.map { CChar(bitPattern: $0) } + [0], directory: nil, emptyPath: false, follow: true, caller: caller)
            return try paths.resolve(start, caller: caller).target
        }
        status = try found.status()
        guard status.st_mode & S_IFMT == S_IFSOCK else { throw .connectionRefused }
        guard ownDevices.contains(UInt64(status.st_dev)) else {
            reporter?.record(Denial(
                operation: .network, layer: .supervisor, syscall: "connect", path: name,
                reason: "a unix socket outside the sandbox's own /tmp and /dev/shm, where a host process could be listening", errno: EACCES))
            throw .permissionDenied
        }
        // The checked inode, named through our own descriptor table.
        let target = withUnsafeBytes(of: UInt16(AF_UNIX)) { Array($0) } + Array("/proc/self/fd/\(found.rawValue)".utf8) + [0]
        return try connecting(ConnectJob(socket: socket, address: target, keeping: found), request: request, listener: listener)
    }

    /// The connect itself: here when the socket does not block; otherwise
    /// (the listener's backlog may be full, for as long as the command
    /// likes) on a thread of its own, which answers the request, so that the
    /// serving loop (the other calls, the terminal relay) goes on. Nil: answered there.
    private func connecting(_ job: ConnectJob, request: csb_seccomp_notif, listener: OwnedDescriptor, waiting: WaitingConnects? = nil)
        throws(Errno) -> Int64?
    {
        let waitingConnects = waiting ?? self.waitingConnects
        let flags = fcntl(job.socket.rawValue, F_GETFL)
        guard flags >= 0 else { throw Errno(rawValue: errno) }
        if flags & O_NONBLOCK != 0 {
            let result = try powers.asChild { () throws(Errno) -> Int32 in job.connect() }
            guard result == 0 else { throw Errno(rawValue: result) }
            return 0
        }
        guard waitingConnects.enter() else { throw .resourceTemporarilyUnavailable }
        let counter = waitingConnects
        // Close-on-exec: a `--picker` program spawned while the connect
        // waits must not inherit the seccomp listener.
        guard let answer = try? listener.duplicate(),
              job.startThread(answering: request.id, on: answer, done: { counter.leave() }) else {
            counter.leave()
            throw .resourceTemporarilyUnavailable
        }
        return nil
    }

    enum Operation {
        case chmod, chown, utime, utimes, utimensat, setxattr, removexattr
        /// `getxattr`/`listxattr`: answered beneath readable folders.
        case getxattr, listxattr
        /// `inotify_add_watch(fd, path, mask)`: allowed beneath readable folders.
        case watch

        /// Reads are answered beneath readable folders and refused with
        /// EACCES elsewhere, as Landlock refuses an unreadable file; changes
        /// beneath writable folders, EPERM elsewhere.
        var reads: Bool { self == .getxattr || self == .listxattr || self == .watch }
    }

    /// How one syscall names its target and operation.
    struct Shape {
        let operation: Operation
        /// Argument index of a dirfd, or nil for AT_FDCWD.
        let directoryArgument: Int?
        /// Argument index of the path, or nil when the syscall takes an fd.
        let pathArgument: Int?
        let follows: Bool
        /// Argument index of AT_* flags, if any.
        var flagsArgument: Int? = nil
        /// The AT_* flags the kernel accepts there; any other is EINVAL.
        var allowedFlags: Int32 = 0
    }

    static let shapes: [Int32: Shape] = {
        var table: [Int32: Shape] = [:]
        func add(_ name: String, _ shape: Shape) {
            if let number = SyscallFilter.number(name) { table[number] = shape }
        }
        let atFlags = AT_SYMLINK_NOFOLLOW | CSB_AT_EMPTY_PATH
        add("chmod", Shape(operation: .chmod, directoryArgument: nil, pathArgument: 0, follows: true))
        add("fchmod", Shape(operation: .chmod, directoryArgument: 0, pathArgument: nil, follows: true))
        add("fchmodat", Shape(operation: .chmod, directoryArgument: 0, pathArgument: 1, follows: true))
        add("fchmodat2", Shape(operation: .chmod, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: 3, allowedFlags: atFlags))
        add("chown", Shape(operation: .chown, directoryArgument: nil, pathArgument: 0, follows: true))
        add("lchown", Shape(operation: .chown, directoryArgument: nil, pathArgument: 0, follows: false))
        add("fchown", Shape(operation: .chown, directoryArgument: 0, pathArgument: nil, follows: true))
        add("fchownat", Shape(operation: .chown, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: 4, allowedFlags: atFlags))
        add("utime", Shape(operation: .utime, directoryArgument: nil, pathArgument: 0, follows: true))
        add("utimes", Shape(operation: .utimes, directoryArgument: nil, pathArgument: 0, follows: true))
        add("futimesat", Shape(operation: .utimes, directoryArgument: 0, pathArgument: 1, follows: true))
        add("utimensat", Shape(operation: .utimensat, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: 3, allowedFlags: atFlags))
        add("setxattr", Shape(operation: .setxattr, directoryArgument: nil, pathArgument: 0, follows: true))
        add("lsetxattr", Shape(operation: .setxattr, directoryArgument: nil, pathArgument: 0, follows: false))
        add("fsetxattr", Shape(operation: .setxattr, directoryArgument: 0, pathArgument: nil, follows: true))
        add("removexattr", Shape(operation: .removexattr, directoryArgument: nil, pathArgument: 0, follows: true))
        add("lremovexattr", Shape(operation: .removexattr, directoryArgument: nil, pathArgument: 0, follows: false))
        add("fremovexattr", Shape(operation: .removexattr, directoryArgument: 0, pathArgument: nil, follows: true))
        add("getxattr", Shape(operation: .getxattr, directoryArgument: nil, pathArgument: 0, follows: true))
        add("lgetxattr", Shape(operation: .getxattr, directoryArgument: nil, pathArgument: 0, follows: false))
        add("listxattr", Shape(operation: .listxattr, directoryArgument: nil, pathArgument: 0, follows: true))
        add("llistxattr", Shape(operation: .listxattr, directoryArgument: nil, pathArgument: 0, follows: false))
        add("inotify_add_watch", Shape(operation: .watch, directoryArgument: nil, pathArgument: 1, follows: true))
        return table
    }()

    static let connectNumber = SyscallFilter.number("connect") ?? -1

    /// Counts (and, under `--explain`, reports) the supervisor's refusals.
    var reporter: DenialReporter?
    /// Under `--explain`: answers the notifications that only observe.
    var observer: DenialObserver?

    /// The listener already asked for synchronous wake-ups.
    private var synchronousListener: CInt = -1

    /// Receives one request and answers it. Errors answer the child, never crash us.
    func serveOne(listener descriptor: OwnedDescriptor) {
        let listener = descriptor.rawValue
        if synchronousListener != listener {
            synchronousListener = listener
            _ = csb_seccomp_notify_sync_wakeup(listener)  // only faster: older kernels refuse it
        }
        var request = csb_seccomp_notif()
        guard csb_seccomp_notify_receive(listener, &request) == 0 else { return }  // ENOENT: the caller died
        if Self.shapes[request.data.nr] == nil, request.data.nr != Self.connectNumber, let observer {
            var response = observer.observe(request, listener: listener, powers: powers)
            _ = csb_seccomp_notify_respond(listener, &response)
            return
        }
        var response = csb_seccomp_notif_resp()
        response.id = request.id
        do throws(Errno) {
            if request.data.nr == Self.connectNumber {
                guard let value = try connect(request, listener: descriptor) else { return }  // answered by its thread
                response.val = value
            } else {
                response.val = try handle(request, listener: listener)
            }
        } catch {
            response.error = -error.rawValue
        }
        _ = csb_seccomp_notify_respond(listener, &response)
    }

    /// What a request needs, copied from the caller and bound to it before its id is confirmed.
    private struct Prepared {
        let details: OperationDetails
        let start: CommandPaths.Start
        /// The caller's inotify instance, for a watch.
        let callerInotify: OwnedDescriptor?
    }

    /// Returns the syscall's result for the child.
    private func handle(_ request: csb_seccomp_notif, listener: CInt) throws(Errno) -> Int64 {
        guard let shape = Self.shapes[request.data.nr] else { throw .notPermitted }
        let prepared = try powers.withOurs { () throws(Errno) -> Prepared in try prepare(request, shape: shape) }
        // The pid in the request may have been reused since we opened its /proc entries.
        guard csb_seccomp_notify_id_valid(listener, request.id) == 0 else { throw .noSuchProcess }

        // Resolution, check and operation with the child's powers: with a
        // root launcher's, resolving a name in a folder the child may not
        // search would tell it whether the name exists.
        let caller = pid_t(truncatingIfNeeded: request.pid)
        let outcome = try powers.asChild { () throws(Errno) -> Outcome in
            let resolved = try paths.resolve(prepared.start, caller: caller)
            let (target, status) = (resolved.target, resolved.status)
            // Never act on /proc: there a path names the supervisor's own process.
            guard try !Self.isOnProcFS(target, status: status),
                  try isBeneath(target, status: status, folder: resolved.folder, roots: shape.operation.reads ? readable : writable) else {
                let named: [CChar]? = if case .path(_, let path, _) = prepared.start { path } else { nil }
                refused(shape, number: request.data.nr, path: named, target: target)
                throw shape.operation.reads ? .permissionDenied : .notPermitted
            }
            if case .watch = prepared.details, recordWatches, let instance = prepared.callerInotify {
                // Placed before the watch is made: a watch that cannot be
                // recorded is never made.
                let roots = try Self.mountRoots(above: target, status: status, folder: resolved.folder)
                guard takenAway.isDisjoint(with: roots) else { throw .permissionDenied }
                let slot = try instanceSlot(instance)
                guard watches.count < Self.maximumRecordedWatches else { throw .noSpace }
                let outcome = try prepared.details.perform(on: target, status: status, inotify: instance)
                let descriptor = Int32(truncatingIfNeeded: outcome.result)
                // The same watch again (the kernel returns its number): one record.
                watches.removeAll { $0.instance == slot && $0.descriptor == descriptor }
                watches.append((slot, descriptor, roots))
                return outcome
            }
            return try prepared.details.perform(on: target, status: status, inotify: prepared.callerInotify)
        }
        // Attribute values go back into the child's buffer, through its own
        // memory file, opened only when there is something to write (ls -l
        // mostly reads absent attributes) and bound to the caller as the
        // watch's inotify copy is: opened first, then the id confirmed again,
        // so the thread id still named the waiting caller when it was opened,
        // and a thread id reused afterwards receives nothing.
        if let copy = outcome.copyOut {
            let callerMemory = try powers.withOurs { () throws(Errno) -> OwnedDescriptor in
                OwnedDescriptor(taking: try syscallRetrying { Glibc.open("/proc/\(caller)/mem", O_RDWR | O_CLOEXEC) })
            }
            guard csb_seccomp_notify_id_valid(listener, request.id) == 0 else { throw .noSuchProcess }
            try ChildMemory.write(copy.bytes, at: copy.address, into: callerMemory)
        }
        return outcome.result
    }

    static func isInotifyInstance(_ descriptor: OwnedDescriptor) -> Bool {
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/self/fd/\(descriptor.rawValue)", &buffer, buffer.count - 1)
        return length > 0 && Array(buffer[0..<length].map { UInt8(bitPattern: $0) }) == Array("anon_inode:inotify".utf8)
    }

    /// The index of `instance` among the recorded instances (the same open
    /// file: kcmp), recorded now when it is new.
    private func instanceSlot(_ instance: OwnedDescriptor) throws(Errno) -> Int {
        // Only an inotify instance takes a slot (anything else gets the kernel's EINVAL).
        guard Self.isInotifyInstance(instance) else { throw .invalidArgument }
        for (index, known) in instances.enumerated() where csb_same_open_file(known.rawValue, instance.rawValue) == 1 {
            return index
        }
        guard instances.count < Self.maximumInstances else { throw .noSpace }
        instances.append(instance)
        return instances.count - 1
    }

    /// The mount roots from `target` up to the view's root (".." crosses
    /// mounts as a path walk does; at most 4096 steps): every folder that
    /// can be taken away is the root of a mount of its own (a launch-time
    /// grant's bind, a folder attached in the area), so a watch beneath one
    /// names it here. Where the kernel does not say which folders are mount
    /// roots, every folder on the way is kept.
    static func mountRoots(above target: OwnedDescriptor, status: stat, folder: OwnedDescriptor?) throws(Errno) -> [InodeIdentity] {
        var current: OwnedDescriptor
        if status.isDirectory {
            current = target
        } else {
            guard let folder else { throw .noSuchFileOrDirectory }  // a file the supervisor could not place
            current = folder
        }
        var roots: [InodeIdentity] = []
        for _ in 0..<4096 {
            var mount: UInt64 = 0, device: UInt64 = 0, inode: UInt64 = 0
            var isRoot: CInt = 0
            _ = try syscallRetrying { csb_mount_facts(current.rawValue, &mount, &isRoot, &device, &inode) }
            let identity = InodeIdentity(device: device, inode: inode)
            if isRoot != 0 { roots.append(identity) }
            let parent = OwnedDescriptor(taking: try syscallRetrying {
                openat(current.rawValue, "..", CSB_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            })
            if try parent.status().inodeIdentity == identity { return roots }  // the root: its ".." is itself
            current = parent
        }
        throw .fileNameTooLong
    }

    /// Removes every recorded watch on `folder` or beneath it; false when
    /// one could not be removed (the caller then ends the sandbox).
    func forgetWatches(beneath folder: InodeIdentity) -> Bool {
        // Taken away: nothing more is answered there, not even through a
        // folder the command still holds inside it.
        takenAway.insert(folder)
        readable.remove(folder)
        writable.remove(folder)
        var complete = true
        watches.removeAll { watch in
            guard watch.roots.contains(folder) else { return false }
            // EINVAL: the command removed it already (watch descriptors are not reused soon).
            if csb_inotify_rm_watch(instances[watch.instance].rawValue, watch.descriptor) != 0 && errno != EINVAL { complete = false }
            return true
        }
        return complete
    }

    /// A folder the command reaches from now on (the live grants' area): watches and reads beneath it are answered.
    func addReadableRoot(_ root: OwnedDescriptor) {
        guard let identity = try? root.status().inodeIdentity else { return }
        readable.insert(identity)
    }

    /// Copies the request's arguments out of the caller and opens what it names in /proc.
    private func prepare(_ request: csb_seccomp_notif, shape: Shape) throws(Errno) -> Prepared {
        let caller = pid_t(truncatingIfNeeded: request.pid)  // the calling thread's id
        let memory = ChildMemory(pid: caller)
        let args = Arguments(request.data.args)
        let flags = shape.flagsArgument.map { Int32(truncatingIfNeeded: args[$0]) } ?? 0
        guard flags & ~shape.allowedFlags == 0 else { throw .invalidArgument }
        let inotifyDontFollow: UInt64 = 0x0200_0000  // IN_DONT_FOLLOW, in the mask
        let follows = shape.follows && flags & AT_SYMLINK_NOFOLLOW == 0
            && !(shape.operation == .watch && args[2] & inotifyDontFollow != 0)

        // Everything the operation needs is copied out of the child first.
        var path: [CChar]?
        if let index = shape.pathArgument {
            if args[index] != 0 {
                path = try memory.string(at: args[index], limit: Int(PATH_MAX), tooLong: .fileNameTooLong)
            } else if shape.operation != .utimensat {  // only utimensat(fd, NULL, ...) means the fd itself
                throw .badAddress
            }
        }
        // The operation's own arguments follow the path, or the fd when there is none.
        let first = (shape.pathArgument ?? shape.directoryArgument ?? 0) + 1
        let details = try OperationDetails(shape.operation, args: args, first: first, memory: memory)

        // The child's /proc entries (its cwd, its descriptors) are opened with
        // our powers (see `CallerPowers.withOurs`): they hold nothing the child does not
        // have, and a child that made itself non-dumpable keeps working under a root launcher.
        let start = try paths.start(
            path: path, directory: shape.directoryArgument.map { Int32(truncatingIfNeeded: args[$0]) },
            emptyPath: flags & CSB_AT_EMPTY_PATH != 0, follow: follows, caller: caller)
        // The caller's inotify instance, for a watch, is bound to its process
        // now, before the id check: a thread id reused after the check then
        // cannot receive anything, since the copy fails once the caller is gone.
        var callerInotify: OwnedDescriptor?
        if case .watch = details {
            callerInotify = OwnedDescriptor(taking: try syscallRetrying {
                csb_copy_fd_of_thread(caller, Int32(truncatingIfNeeded: args[0]))
            })
        }
        return Prepared(details: details, start: start, callerInotify: callerInotify)
    }

    /// Tells the reporter: counted always (it costs nothing), explained under `--explain`.
    private func refused(_ shape: Shape, number: Int32, path: [CChar]?, target: OwnedDescriptor) {
        guard let reporter else { return }
        let name = SyscallFilter.supervised.first { SyscallFilter.number($0) == number } ?? "syscall \(number)"
        let shown = path.map { $0.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) } } ?? FilePath.ofDescriptor(target.rawValue)?.bytes ?? []
        let reads = shape.operation.reads
        var reason = reads ? "not beneath a folder the sandbox may read" : "not beneath a folder the sandbox may write (a read-write grant or the container)"
        if let observer {
            reason = observer.reason(operation: reads ? .read : .write, covering: observer.covering(target), path: shown)
        }
        reporter.record(Denial(
            operation: reads ? .read : .metadata, layer: .supervisor, syscall: name, path: shown,
            reason: reason, errno: reads ? EACCES : EPERM))
    }

    private static func isOnProcFS(_ descriptor: OwnedDescriptor, status: stat) throws(Errno) -> Bool {
        // procfs, as every filesystem without a block device, has an
        // anonymous device number (major 0): a file on a disk is answered
        // without asking the kernel.
        guard csb_device_major(UInt64(status.st_dev)) == 0 else { return false }
        var fsid: UInt64 = 0
        var type: UInt64 = 0
        _ = try syscallRetrying { csb_filesystem_identity(descriptor.rawValue, &fsid, &type) }
        return type == 0x9FA0  // PROC_SUPER_MAGIC
    }

    /// True when `target` (whose `status` is given) is one of `roots` or
    /// lies beneath one (`Ancestry.isBeneath`); a file's folder is found by
    /// the name the kernel keeps, in the command's view.
    func isBeneath(_ target: OwnedDescriptor, status: stat, folder: OwnedDescriptor?, roots: Set<InodeIdentity>) throws(Errno) -> Bool {
        try Ancestry.isBeneath(target, status: status, folder: folder, roots: roots) { file, identity in
            try? paths.folder(holding: file, identity: identity, unlinked: false)
        }
    }

    /// Requests are served with the child's powers from here to `endServing` (see `CallerPowers`).
    func beginServing() { powers.begin() }
    func endServing() { powers.end() }
}

/// The serving thread's capabilities: it keeps the child's powers (no
/// effective capabilities) while it serves, so that a request costs no
/// capset; ours are raised only where /proc refuses the child's.
final class CallerPowers {
    /// The serving thread, and its capabilities from before `begin`
    /// cleared its effective set.
    private var serving: (thread: pthread_t, saved: SavedCapabilities)?

    func begin() {
        guard serving == nil, let saved = try? SavedCapabilities.clearingEffective() else { return }
        serving = (pthread_self(), saved)
    }

    /// Gives the serving thread its capabilities back.
    func end() {
        guard let current = serving, pthread_equal(current.thread, pthread_self()) != 0 else { return }
        current.saved.restore()
        serving = nil
    }

    /// True on the thread between `begin` and `end`.
    private var servingOnThisThread: SavedCapabilities? {
        guard let current = serving, pthread_equal(current.thread, pthread_self()) != 0 else { return nil }
        return current.saved
    }

    /// Runs `body` (reading the caller's memory, opening its /proc entries)
    /// with the child's powers while serving, and once more with ours if
    /// those were refused, as for a non-dumpable child under a root
    /// launcher: the answer is the one ours alone would give.
    func withOurs<T>(_ body: () throws(Errno) -> T) throws(Errno) -> T {
        guard let saved = servingOnThisThread, saved.hadEffective else { return try body() }
        do {
            return try body()
        } catch let error where error == .permissionDenied || error == .notPermitted {
            saved.restore()
            defer { precondition((try? SavedCapabilities.clearingEffective()) != nil, "could not clear the supervisor's capabilities") }
            return try body()
        }
    }

    /// Runs `body` with this thread's effective capabilities cleared, so the
    /// kernel checks ownership and permissions as it would for the child.
    func asChild<T>(_ body: () throws(Errno) -> T) throws(Errno) -> T {
        if servingOnThisThread != nil { return try body() }  // already cleared
        let saved = try SavedCapabilities.clearingEffective()
        defer { saved.restore() }
        return try body()
    }
}

/// A thread's capability sets (`__user_cap_data_struct[2]`), saved while
/// its effective set is cleared.
private struct SavedCapabilities {
    private var raw: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0, 0, 0)

    /// Clears the calling thread's effective set and returns the sets as they were.
    static func clearingEffective() throws(Errno) -> SavedCapabilities {
        var saved = SavedCapabilities()
        let cleared = withUnsafeMutableBytes(of: &saved.raw) { csb_thread_effective_caps_clear($0.baseAddress!.assumingMemoryBound(to: UInt32.self)) }
        guard cleared == 0 else { throw .notPermitted }
        return saved
    }

    /// Effective is the first of each { effective, permitted, inheritable }.
    var hadEffective: Bool { raw.0 != 0 || raw.3 != 0 }

    func restore() {
        let restored = withUnsafeBytes(of: raw) { csb_thread_effective_caps_restore($0.baseAddress!.assumingMemoryBound(to: UInt32.self)) }
        precondition(restored == 0, "could not restore the supervisor's capabilities")
    }
}

/// What a supervised call returns, and bytes for the child's buffer, if any.
private struct Outcome {
    var result: Int64 = 0
    var copyOut: (bytes: [UInt8], address: UInt64)?
}

/// The operation's own arguments, copied from the child and checked: every
/// conversion of a child's value is explicit, so none can trap.
private enum OperationDetails {
    case chmod(mode: UInt32)
    case chown(uid: UInt32, gid: UInt32)
    /// nil: set both times to now. Otherwise atime sec, nsec, mtime sec, nsec.
    case times([Int64]?)
    case setxattr(name: [CChar], value: [UInt8], flags: Int32)
    case removexattr(name: [CChar])
    /// `size` already capped; `buffer` is the child's address.
    case getxattr(name: [CChar], buffer: UInt64, size: Int)
    case listxattr(buffer: UInt64, size: Int)
    case watch(mask: UInt32)

    /// XATTR_SIZE_MAX and XATTR_LIST_MAX.
    static let attributeSizeLimit: UInt64 = 65536
    /// XATTR_NAME_MAX plus its NUL; the kernel answers ERANGE beyond.
    static let attributeNameLimit = 256

    init(_ operation: MetadataSupervisor.Operation, args: Arguments, first: Int, memory: ChildMemory) throws(Errno) {
        /// Reads two timestamps; `scale` turns the second field into nanoseconds.
        func times(utimbuf: Bool = false, microseconds: Bool = false) throws(Errno) -> [Int64]? {
            guard args[first] != 0 else { return nil }
            let raw = try memory.bytes(at: args[first], count: utimbuf ? 16 : 32)
            let fields = raw.withUnsafeBytes { bytes in (0..<raw.count / 8).map { bytes.loadUnaligned(fromByteOffset: $0 * 8, as: Int64.self) } }
            if utimbuf { return [fields[0], 0, fields[1], 0] }
            guard microseconds else { return fields }  // timespec: the kernel checks tv_nsec, UTIME_NOW/OMIT kept
            // timeval: the kernel refuses microseconds outside [0, 10^6).
            guard (0..<1_000_000).contains(fields[1]), (0..<1_000_000).contains(fields[3]) else { throw .invalidArgument }
            return [fields[0], fields[1] * 1000, fields[2], fields[3] * 1000]
        }
        func attributeName(_ index: Int) throws(Errno) -> [CChar] {
            try memory.string(at: args[index], limit: Self.attributeNameLimit, tooLong: Errno(rawValue: ERANGE))
        }
        switch operation {
        case .chmod:
            self = .chmod(mode: UInt32(truncatingIfNeeded: args[first]) & 0o7777)  // umode_t, as chmod_common keeps it
        case .chown:
            self = .chown(uid: UInt32(truncatingIfNeeded: args[first]), gid: UInt32(truncatingIfNeeded: args[first + 1]))
        case .utime:
            self = .times(try times(utimbuf: true))
        case .utimes:
            self = .times(try times(microseconds: true))  // struct timeval[2]
        case .utimensat:
            self = .times(try times())  // struct timespec[2]
        case .setxattr:
            let size = args[first + 2]
            guard size <= Self.attributeSizeLimit else { throw .argListTooLong }  // E2BIG, as the kernel
            self = .setxattr(
                name: try attributeName(first),
                value: try memory.bytes(at: args[first + 1], count: Int(size)),
                flags: Int32(truncatingIfNeeded: args[first + 3]))
        case .removexattr:
            self = .removexattr(name: try attributeName(first))
        case .getxattr:
            self = .getxattr(
                name: try attributeName(first), buffer: args[first + 1],
                size: Int(min(args[first + 2], Self.attributeSizeLimit)))  // the kernel caps it too
        case .listxattr:
            self = .listxattr(buffer: args[first], size: Int(min(args[first + 1], Self.attributeSizeLimit)))
        case .watch:
            self = .watch(mask: UInt32(truncatingIfNeeded: args[first]))
        }
    }

    /// Performs the operation.
    func perform(on target: OwnedDescriptor, status: stat, inotify: OwnedDescriptor?) throws(Errno) -> Outcome {
        switch self {
        case .chmod(let mode):
            guard !status.isSymlink else { throw .notSupported }  // Linux has no symlink modes
            // No set-user-ID file ever, and set-group-ID only on folders
            // (where it picks new files' group): another user running the
            // file would run it as this one. Stripped rather than refused,
            // as the kernel itself drops S_ISGID in some cases, so that
            // `tar xf` and `cp -p` as root keep working.
            var kept = mode & ~UInt32(S_ISUID)
            if !status.isDirectory { kept &= ~UInt32(S_ISGID) }
            _ = try syscallRetrying { csb_chmod_fd(target.rawValue, kept) }
        case .chown(let uid, let gid):
            _ = try syscallRetrying { csb_chown_fd(target.rawValue, uid, gid) }
        case .times(let times):
            _ = try syscallRetrying { csb_utimens_fd(target.rawValue, times) }
        case .setxattr(let name, let value, let flags):
            guard !status.isSymlink else { throw .notPermitted }
            _ = try syscallRetrying { csb_setxattr_fd(target.rawValue, name, value, value.count, flags) }
        case .removexattr(let name):
            guard !status.isSymlink else { throw .notPermitted }
            _ = try syscallRetrying { csb_removexattr_fd(target.rawValue, name) }
        case .getxattr(let name, let buffer, let size):
            var value = [UInt8](repeating: 0, count: size)
            let length = try syscallRetrying {
                value.withUnsafeMutableBytes { csb_getxattr_fd(target.rawValue, name, size == 0 ? nil : $0.baseAddress, size) }
            }
            // A size of 0 asks for the length only.
            guard size > 0, length > 0 else { return Outcome(result: Int64(length)) }
            return Outcome(result: Int64(length), copyOut: (bytes: Array(value.prefix(length)), address: buffer))
        case .listxattr(let buffer, let size):
            var list = [CChar](repeating: 0, count: size)
            let length = try syscallRetrying {
                list.withUnsafeMutableBufferPointer { csb_listxattr_fd(target.rawValue, size == 0 ? nil : $0.baseAddress, size) }
            }
            guard size > 0, length > 0 else { return Outcome(result: Int64(length)) }
            return Outcome(result: Int64(length), copyOut: (bytes: list.prefix(length).map { UInt8(bitPattern: $0) }, address: buffer))
        case .watch(let mask):
            // The watch goes on the child's own inotify instance, so the
            // descriptor we return is the child's.
            guard let instance = inotify else { throw .badFileDescriptor }
            return Outcome(result: Int64(try syscallRetrying { csb_inotify_watch_fd(instance.rawValue, target.rawValue, mask) }))
        }
        return Outcome()
    }
}

/// A notification's six raw arguments, read without an allocation.
private struct Arguments {
    let raw: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)

    init(_ raw: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)) { self.raw = raw }

    subscript(index: Int) -> UInt64 {
        precondition((0..<6).contains(index))  // indices come from the shapes table, never the child
        return withUnsafeBytes(of: raw) { $0.load(fromByteOffset: index * 8, as: UInt64.self) }
    }
}

/// Reads and writes a notifying child's memory (`process_vm_readv`,
/// `process_vm_writev`), as the kernel would copy its arguments.
struct ChildMemory {
    let pid: pid_t

    func bytes(at address: UInt64, count: Int) throws(Errno) -> [UInt8] {
        guard count > 0 else { return [] }
        guard !address.addingReportingOverflow(UInt64(count)).overflow else { throw .badAddress }
        var buffer = [UInt8](repeating: 0, count: count)
        let read = buffer.withUnsafeMutableBytes { csb_read_process_memory(pid, address, $0.baseAddress!, count) }
        guard read == count else { throw read < 0 && errno != EFAULT ? Errno(rawValue: errno) : .badAddress }
        return buffer
    }

    /// A NUL-terminated string, NUL included, read page by page so that a
    /// string ending just before an unmapped page still reads.
    func string(at address: UInt64, limit: Int, tooLong: Errno) throws(Errno) -> [CChar] {
        // One buffer, filled in place and cut after the NUL.
        var result = [CChar](repeating: 0, count: limit)
        var filled = 0
        var cursor = address
        while filled < limit {
            let count = min(4096 - Int(cursor % 4096), limit - filled)
            let (next, overflow) = cursor.addingReportingOverflow(UInt64(count))
            guard !overflow else { throw .badAddress }
            let read = result.withUnsafeMutableBytes { csb_read_process_memory(pid, cursor, $0.baseAddress! + filled, count) }
            guard read == count else { throw read < 0 && errno != EFAULT ? Errno(rawValue: errno) : .badAddress }
            if let end = result[filled..<(filled + count)].firstIndex(of: 0) {
                result.removeLast(limit - end - 1)
                return result
            }
            filled += count
            cursor = next
        }
        throw tooLong
    }

    /// Writes through the caller's `/proc/TID/mem`, opened before its
    /// notification was confirmed: tied to that process, not to its id.
    static func write(_ bytes: [UInt8], at address: UInt64, into memory: OwnedDescriptor) throws(Errno) {
        guard !bytes.isEmpty else { return }
        guard address <= UInt64(Int64.max), !address.addingReportingOverflow(UInt64(bytes.count)).overflow else { throw .badAddress }
        let written = bytes.withUnsafeBytes { pwrite(memory.rawValue, $0.baseAddress, $0.count, off_t(address)) }
        guard written == bytes.count else { throw written < 0 && errno != EIO && errno != EFAULT ? Errno(rawValue: errno) : .badAddress }
    }
}

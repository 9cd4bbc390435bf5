@preconcurrency import Glibc
import Sandbox
import SystemPackage

/// What a state knows of the folders apps can write, or could once: the one
/// rule every unconfined path (append, coordinate, sync-simulator, versions,
/// bookmark files, policy files, `pick --select`) is walked with.
extension GrantBroker {
    /// Every folder this state ever let an app write, by file handle and
    /// filesystem: every read-write grant of every app, live, revoked,
    /// pending or moved, and every folder a policy made writable at a launch.
    public func everWritableFolders() throws(GrantError) -> [LinkTrust.FolderKey] {
        try read { (ledger) throws(GrantError) in try ledger.everWritableFolders() } ?? []
    }

    /// Records each folder among `policy`'s read-write system paths, before a
    /// launch makes it writable, so that links the app plants there are never
    /// followed by an unconfined command, during the launch or after. Files
    /// (`/dev/null`) need nothing: a link is planted in a folder. Throws when
    /// a folder cannot be identified or recorded: the launch must not go on.
    public func recordWritableSystemFolders(of policy: Policy) throws(GrantError) {
        for systemPath in policy.systemPaths where systemPath.access == .readWrite {
            let path = FilePath(systemPath.path)
            guard let folder = try? OwnedDescriptor.openPath(path, follow: true),
                  let status = try? folder.status(), status.st_mode & S_IFMT == S_IFDIR else { continue }
            let identity = try FolderIdentity.of(folder, path: path)
            // Written only when new: a write removes the launch cache.
            if try read({ (ledger) throws(GrantError) in try ledger.isRecordedWritable(identity) }) == true { continue }
            try writing().recordWritable(identity, path: path, source: "policy " + policy.source, at: Int64(time(nil)))
        }
    }
}

extension LinkTrust {
    /// Links as the state at `statePath` and the containers under
    /// `containerBase` let an unconfined command follow them (see `LinkTrust`).
    /// No state there: no app was ever granted a folder, and only the
    /// containers (and other users' folders) are distrusted. A state that
    /// exists but cannot be read trusts no link: any folder might be an app's.
    public static func ofState(_ statePath: String, containerBase: String) -> LinkTrust {
        LinkTrust {
            var facts = Facts()
            if let base = try? OwnedDescriptor.openPath(FilePath(containerBase), follow: true) { facts.folders.append(base) }
            var status = stat()
            if lstat(statePath, &status) != 0 {
                if errno == ENOENT { return facts }
                facts.unknown = "the grant state \(statePath) cannot be examined (\(Errno(rawValue: errno))): no folder can be told apart from an app's"
                return facts
            }
            do {
                let broker = try GrantBroker(state: try StateDirectory(path: statePath))
                facts.writable = try broker.everWritableFolders()
            } catch {
                facts.unknown = "the grant state cannot be read (\(error)): no folder can be told apart from an app's"
            }
            return facts
        }
    }

    /// The same, with a broker already open.
    public static func of(_ broker: GrantBroker, containerBase: String) -> LinkTrust {
        LinkTrust {
            var facts = Facts()
            if let base = try? OwnedDescriptor.openPath(FilePath(containerBase), follow: true) { facts.folders.append(base) }
            do { facts.writable = try broker.everWritableFolders() } catch {
                facts.unknown = "the grant state cannot be read (\(error)): no folder can be told apart from an app's"
            }
            return facts
        }
    }
}

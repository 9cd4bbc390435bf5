@preconcurrency import Glibc
import FoundationEssentials
import SystemPackage

/// An app's own container, as on iOS:
/// `<base>/containers/<app>/<install-id>/{Documents,Library,tmp}`.
///
/// The install id is random and changes when the app is reinstalled, so a
/// path the app stored as an absolute string breaks, exactly as on iOS.
public struct AppContainer: Sendable, Equatable {
    public let app: AppID
    public let installID: String
    public let root: String

    public var documents: String { root + "/Documents" }
    public var library: String { root + "/Library" }
    public var temporary: String { root + "/tmp" }

    static let subfolders = ["Documents", "Library", "tmp"]

    /// `$XDG_DATA_HOME/sandboxed-run`, or `~/.local/share/sandboxed-run`.
    public static func defaultBase(environment: [String: String]) throws(SandboxError) -> String {
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            return data + "/sandboxed-run"
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else {
            throw .usage("neither XDG_DATA_HOME nor HOME is set to an absolute path: set one so sandboxed-run knows where app containers live")
        }
        return home + "/.local/share/sandboxed-run"
    }

    /// The folder holding every container the app has had: the app can
    /// write in it, so nothing found there is trusted.
    public static func folder(of app: AppID, base: String) -> String {
        base + "/containers/" + app.rawValue
    }

    /// The app's current container, created on first use.
    public static func current(for app: AppID, base: String) throws(SandboxError) -> AppContainer {
        try withAppLock(app, base: base) { folder throws(SandboxError) in
            if let id = try installIDs(in: folder).first {
                let container = AppContainer(app: app, installID: id, root: folder + "/" + id)
                try container.ensureSubfolders()
                return container
            }
            return try create(app: app, folder: folder)
        }
    }

    /// Moves the app's container to a new install id, contents and all, as
    /// an app update does. Returns the old and the new container.
    public static func reinstall(_ app: AppID, base: String) throws(SandboxError) -> (old: AppContainer, new: AppContainer) {
        try withAppLock(app, base: base) { folder throws(SandboxError) in
            guard let oldID = try installIDs(in: folder).first else {
                let created = try create(app: app, folder: folder)
                return (created, created)
            }
            let newID = UUID().uuidString
            let old = AppContainer(app: app, installID: oldID, root: folder + "/" + oldID)
            let new = AppContainer(app: app, installID: newID, root: folder + "/" + newID)
            // One rename: a crash leaves either the old container or the new one.
            guard rename(old.root, new.root) == 0 else {
                throw .setup(step: "renaming \(old.root) to \(new.root)", errno: Errno(rawValue: errno))
            }
            return (old, new)
        }
    }

    private static func create(app: AppID, folder: String) throws(SandboxError) -> AppContainer {
        let id = UUID().uuidString
        // Build under a hidden name, then rename into place: never half a container.
        let staging = folder + "/.staging-" + id
        try makeDirectory(staging)
        for name in subfolders { try makeDirectory(staging + "/" + name) }
        let container = AppContainer(app: app, installID: id, root: folder + "/" + id)
        guard rename(staging, container.root) == 0 else {
            throw .setup(step: "renaming \(staging) into place", errno: Errno(rawValue: errno))
        }
        return container
    }

    private func ensureSubfolders() throws(SandboxError) {
        for name in Self.subfolders {
            let path = root + "/" + name
            if mkdir(path, 0o700) != 0, errno != EEXIST {
                throw .setup(step: "creating \(path)", errno: Errno(rawValue: errno))
            }
        }
    }

    /// Install ids are the visible subfolders; more than one means someone
    /// meddled, and guessing would hand the app the wrong data.
    private static func installIDs(in folder: String) throws(SandboxError) -> [String] {
        let ids: [String]
        do {
            ids = try directoryEntries(folder).map(\.name).filter { !$0.hasPrefix(".") }
        } catch {
            throw .setup(step: "reading \(folder)", errno: error)
        }
        if ids.count > 1 {
            throw .usage("\(folder) holds several containers (\(ids.sorted().joined(separator: ", "))): keep the right one and move the others away")
        }
        return ids
    }

    private static func withAppLock<T>(_ app: AppID, base: String, _ body: (String) throws(SandboxError) -> T) throws(SandboxError) -> T {
        let folder = folder(of: app, base: base)
        // Every folder above it exists but at the first launch: one mkdir, not one per level.
        if mkdir(folder, 0o700) != 0, errno == ENOENT {
            var partial = ""
            for component in (base + "/containers").split(separator: "/") {
                partial += "/" + String(component)
                try makeDirectory(partial, allowExisting: true)
            }
        }
        try makeDirectory(folder, allowExisting: true)
        let fd = open(folder + "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .setup(step: "opening \(folder)/.lock", errno: Errno(rawValue: errno)) }
        let lock = OwnedDescriptor(taking: fd)
        do {
            _ = try syscallRetrying { flock(lock.rawValue, LOCK_EX) }
        } catch {
            throw .setup(step: "locking \(folder)", errno: error)
        }
        return try body(folder)
    }

    private static func makeDirectory(_ path: String, allowExisting: Bool = false) throws(SandboxError) {
        if mkdir(path, 0o700) != 0, !(allowExisting && errno == EEXIST) {
            throw .setup(step: "creating \(path)", errno: Errno(rawValue: errno))
        }
    }
}

package android.app;

import android.content.ComponentName;
import android.content.Intent;
import android.os.Bundle;
import android.view.ContextThemeWrapper;
import android.view.LayoutInflater;
import android.view.View;
import android.view.Window;

public class Activity extends ContextThemeWrapper {
    public static final int RESULT_OK = -1;
    public static final int RESULT_CANCELED = 0;
    public Activity() { throw new RuntimeException("Stub!"); }
    protected void onCreate(Bundle savedInstanceState) { throw new RuntimeException("Stub!"); }
    protected void onStart() { throw new RuntimeException("Stub!"); }
    protected void onRestart() { throw new RuntimeException("Stub!"); }
    protected void onResume() { throw new RuntimeException("Stub!"); }
    protected void onPause() { throw new RuntimeException("Stub!"); }
    protected void onStop() { throw new RuntimeException("Stub!"); }
    protected void onDestroy() { throw new RuntimeException("Stub!"); }
    protected void onSaveInstanceState(Bundle outState) { throw new RuntimeException("Stub!"); }
    public void onWindowFocusChanged(boolean hasFocus) { throw new RuntimeException("Stub!"); }
    public void onBackPressed() { throw new RuntimeException("Stub!"); }
    public void onLowMemory() { throw new RuntimeException("Stub!"); }
    public void onTrimMemory(int level) { throw new RuntimeException("Stub!"); }
    public final Application getApplication() { throw new RuntimeException("Stub!"); }
    public Intent getIntent() { throw new RuntimeException("Stub!"); }
    public void setIntent(Intent newIntent) { throw new RuntimeException("Stub!"); }
    public ActionBar getActionBar() { throw new RuntimeException("Stub!"); }
    @Deprecated public FragmentManager getFragmentManager() { throw new RuntimeException("Stub!"); }
    public Window getWindow() { throw new RuntimeException("Stub!"); }
    public View getCurrentFocus() { throw new RuntimeException("Stub!"); }
    public boolean hasWindowFocus() { throw new RuntimeException("Stub!"); }
    public LayoutInflater getLayoutInflater() { throw new RuntimeException("Stub!"); }
    public ComponentName getComponentName() { throw new RuntimeException("Stub!"); }
    public ComponentName getCallingActivity() { throw new RuntimeException("Stub!"); }
    public String getCallingPackage() { throw new RuntimeException("Stub!"); }
    public int getTaskId() { throw new RuntimeException("Stub!"); }
    public boolean isTaskRoot() { throw new RuntimeException("Stub!"); }
    public boolean moveTaskToBack(boolean nonRoot) { throw new RuntimeException("Stub!"); }
    public boolean isChangingConfigurations() { throw new RuntimeException("Stub!"); }
    public void setContentView(int layoutResID) { throw new RuntimeException("Stub!"); }
    public void setContentView(View view) { throw new RuntimeException("Stub!"); }
    public <T extends View> T findViewById(int id) { throw new RuntimeException("Stub!"); }
    public final void runOnUiThread(Runnable action) { throw new RuntimeException("Stub!"); }
    public void setTitle(CharSequence title) { throw new RuntimeException("Stub!"); }
    public final CharSequence getTitle() { throw new RuntimeException("Stub!"); }
    public void finish() { throw new RuntimeException("Stub!"); }
    public boolean isFinishing() { throw new RuntimeException("Stub!"); }
    public boolean isDestroyed() { throw new RuntimeException("Stub!"); }
    public void recreate() { throw new RuntimeException("Stub!"); }
    public final void setResult(int resultCode) { throw new RuntimeException("Stub!"); }
    public final void requestPermissions(String[] permissions, int requestCode) { throw new RuntimeException("Stub!"); }
}
